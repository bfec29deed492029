"""Where work runs: the executor contract (`base`), the fake family for tests (`fake`), local
processes bound to GPUs (`local`, with `launcher`), and CUDA MPS daemons and limits (`mps`).
See docs/executors.md."""
