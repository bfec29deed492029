"""A Slurm job's environment travels inside its batch script, never as sbatch's environment.

gpupool runs ``sbatch`` as the server (root in per-user mode) with the server's own fixed
environment (`cli`) and ``--export=NONE`` (`EXPORT`), so neither a workload's variables nor
the server's reach ``sbatch`` or the job by that route (security review F1). The job's
environment (`executors.jobenv`: the allowlist, the account's ``HOME``/``USER``/..., what the
workload declares, gpupool's own) is written into the script instead by `with_environment`:
right after ``#!/bin/sh``, one ``export NAME='value'`` line per variable, each value quoted
with `shlex.quote`, so spaces, quotes, ``$``, backquotes and newlines reach the job exactly;
then ``export SLURM_EXPORT_ENV=ALL``, so that ``srun`` inside the job (a gang's, or the
user's own) passes the job's environment on instead of inheriting ``NONE`` from sbatch.

The script runs as the job's own account on the compute node, where Slurm has already set
its ``SLURM_*`` variables and the GPUs' ``CUDA_VISIBLE_DEVICES`` (from ``--gres``); the
exports come after and run as that account: a declared ``PATH`` or ``LD_PRELOAD`` shapes the
job only. The script is readable by the job's owner and Slurm's operators, as the
environment Slurm stored with ``--export=ALL`` was before.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Mapping

log = logging.getLogger(__name__)

#: sbatch's --export: only Slurm's own SLURM_* variables; the job's come from the script.
EXPORT = "--export=NONE"
SHEBANG = "#!/bin/sh\n"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def exports(env: Mapping[str, str]) -> str:
    """``export NAME='value'`` lines for `env`. A name the shell cannot export is left out
    with a warning: the API accepts only shell names, so such a name can only come from the
    server's own environment (an ``LC_*`` or ``GPUPOOL_JOB_ENV_PASS`` name)."""
    lines = []
    for name, value in env.items():
        if _NAME.fullmatch(name) is None:
            log.warning("not giving %r to a Slurm job: not a shell variable name", name)
            continue
        lines.append(f"export {name}={shlex.quote(value)}\n")
    return "".join(lines)


def with_environment(script: str, env: Mapping[str, str]) -> str:
    """`script` (a ``#!/bin/sh`` script) that first exports `env` (see the module
    docstring)."""
    if not script.startswith(SHEBANG):
        raise ValueError(f"a batch script starts with {SHEBANG!r}")
    body = script[len(SHEBANG) :]
    return SHEBANG + exports(env) + "export SLURM_EXPORT_ENV=ALL\n" + body
