"""A Slurm job's environment travels inside its batch script, never as sbatch's environment.

gpupool runs ``sbatch`` as the server (root in per-user mode) with the server's own fixed
environment (`cli`) and ``--export=NONE`` (`EXPORT`), so neither a workload's variables nor
the server's reach ``sbatch`` or the job by that route (security review F1). The job's
environment (`engines.common.jobenv`: the allowlist, the account's ``HOME``/``USER``/..., what the
workload declares, gpupool's own) is written into the script instead by `with_environment`:
right after ``#!/bin/sh`` and `START_GUARD`, one ``export NAME='value'`` line per variable,
each value quoted with `shlex.quote`, so spaces, quotes, ``$``, backquotes and newlines reach
the job exactly;
then ``export SLURM_EXPORT_ENV=ALL``, so that ``srun`` inside the job (a gang's, or the
user's own) passes the job's environment on instead of inheriting ``NONE`` from sbatch.

The script runs as the job's own account on the compute node, where Slurm has already set
its ``SLURM_*`` variables and the GPUs' ``CUDA_VISIBLE_DEVICES`` (from ``--gres``); the
exports come after and run as that account: a declared ``PATH`` or ``LD_PRELOAD`` shapes the
job only. The script is readable by the job's owner and Slurm's operators, as the
environment Slurm stored with ``--export=ALL`` was before.

A stop that comes before the script starts: ``scancel --signal`` reaches only processes that
run, and slurmd starts a batch script up to seconds after Slurm reports the job running (the
prolog, the launch), so a TERM sent in that window is lost. gpupool therefore first marks the
job stopped in slurmctld (its ``Comment`` ends in `STOPPED`, `stop_comment`) and then signals;
the script's first line (`START_GUARD`, before any of the job's variables) asks ``squeue`` for
its own job's comment and, when it is marked, sends itself SIGTERM before running anything.
Either the script ran when the signal came (it got the signal) or it starts after the mark was
made (it sees it): the job gets exactly one TERM. Where ``squeue`` cannot answer on the node
the line does nothing, and gpupool's kill after the grace still ends the job.

`gang_script` is the script of a multi-node job (see `executor`).
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Mapping

from gpupool.domain import Allocation
from gpupool.engines.common.gangenv import gang_env

log = logging.getLogger(__name__)

#: sbatch's --export: only Slurm's own SLURM_* variables; the job's come from the script.
EXPORT = "--export=NONE"
SHEBANG = "#!/bin/sh\n"
#: the end of a job's Comment once gpupool stopped it (`stop_comment`)
STOPPED = " stopped-by-gpupool"
#: the script's first command: stop at once if gpupool stopped the job before it started
START_GUARD = (
    'case "$(squeue -h -j "$SLURM_JOB_ID" -o %k 2>/dev/null)" in'
    f' *"{STOPPED}") echo "gpupool: the job was stopped before it started" >&2;'
    " kill -TERM $$;; esac\n"
)
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


def stop_comment(workload_id: str) -> str:
    """The Comment of a job gpupool stopped (`START_GUARD` looks for it)."""
    return f"gpupool:{workload_id}{STOPPED}"


def with_environment(script: str, env: Mapping[str, str]) -> str:
    """`script` (a ``#!/bin/sh`` script) that first runs `START_GUARD`, then exports `env`
    (see the module docstring)."""
    if not script.startswith(SHEBANG):
        raise ValueError(f"a batch script starts with {SHEBANG!r}")
    body = script[len(SHEBANG) :]
    return SHEBANG + START_GUARD + exports(env) + "export SLURM_EXPORT_ENV=ALL\n" + body


def gang_script(allocation: Allocation, command: tuple[str, ...] | list[str]) -> str:
    """The batch script of a multi-node job: the gang environment, then the command once per
    node (srun), each with its NODE_RANK."""
    env = gang_env(allocation, master_addr="__NODE0__")
    exports = " ".join(
        f'{k}="${{SLURMD_NODENAME:-$(hostname)}}"' if v == "__NODE0__" else f"{k}={shlex.quote(v)}"
        for k, v in env.items()
    )
    per_node = 'NODE_RANK="$SLURM_NODEID"; export NODE_RANK; exec "$@"'
    run = shlex.join(
        ["srun", "--kill-on-bad-exit=1", "--ntasks-per-node=1", "sh", "-c", per_node, "gpupool"]
        + list(command)
    )
    return f"#!/bin/sh\nexport {exports}\nexec {run}\n"
