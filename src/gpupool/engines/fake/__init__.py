"""The fake engine of the tests and benchmarks (`engine`) and its scriptable executors
(`executor`). Not registered: `gpupool up` does not offer it."""
