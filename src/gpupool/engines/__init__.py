"""Engines: where work runs. Each engine is one folder with the same files (`engine.py`: the
engine and its options; `executor.py`; `inventory.py`; `notebooks.py` where it runs them):
`local` runs work on this host, `kubernetes` as pods of a cluster, `slurm` as batch jobs of
a Slurm cluster, `fake` serves the tests, `template` is the one to copy. `common` holds the
contract (`common.engine`, `common.executor`) and what several engines share; `registry`
names the engines `gpupool up --engine NAME` offers. See docs/architecture.md.

Package faces import nothing: the local engine's job launcher runs as
``python -m gpupool.engines.local.launcher`` for every job and must stay light.
"""
