"""A skeleton engine to copy when adding one (docs/architecture.md, "How to add an engine").

Copy this folder to ``engines/<name>/``, rename the classes, fill in what each docstring
asks, and add one line to `gpupool.engines.registry.ENGINES`. Not registered itself.
"""
