"""Commands: what an operating system can execute at all.

`check_command` refuses, at submit time, an argv that no executor could ever launch: an empty
program, a NUL byte (C strings end there), an argument or a whole argv longer than the kernel
accepts. The limits are given by the caller (the server reads them from the OS), so this
module stays pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpupool.domain.errors import ValidationError

#: Linux refuses a single argument or environment string longer than this (MAX_ARG_STRLEN,
#: 32 pages of 4 KiB) with E2BIG, whatever ARG_MAX is.
LINUX_MAX_ARG_STRLEN = 131072
#: Bytes of the argv + environment budget left for the job's environment and the launcher's
#: own arguments (the executor adds CUDA_VISIBLE_DEVICES, PATH, HOME, ...).
ENV_RESERVE_BYTES = 64 * 1024
#: Each argument also costs a pointer in the new process's argv array.
POINTER_BYTES = 8


@dataclass(frozen=True, slots=True)
class ArgLimits:
    """The kernel's limits on what `execve` accepts.

    arg_max: the whole argv plus environment, in bytes (`sysconf(SC_ARG_MAX)`).
    arg_strlen_max: one argument or environment string, in bytes including its NUL
        terminator (Linux: 131072); None where the OS has no such limit.
    """

    arg_max: int = 2 * 1024 * 1024
    arg_strlen_max: int | None = LINUX_MAX_ARG_STRLEN

    @property
    def argv_budget(self) -> int:
        """Bytes a workload's own argv may use: ARG_MAX minus the environment's reserve."""
        return max(self.arg_max - ENV_RESERVE_BYTES, self.arg_max // 2)


def _nul(value: str, where: str) -> None:
    if "\x00" in value:
        raise ValidationError(
            f"{where} contains a NUL byte (\\u0000), which no program can receive; remove it",
            where.split("[", 1)[0],
        )


def check_command(
    command: Sequence[str],
    limits: ArgLimits,
    *,
    env: Mapping[str, str] | None = None,
    field: str = "command",
) -> None:
    """Raise ValidationError (naming `field` and the bad element) if `command` (and `env`,
    when given) could never be executed under `limits`. An empty `command` is allowed here;
    whether one is required is the caller's rule."""
    if command and not command[0].strip():
        raise ValidationError(
            f"{field}[0] is empty or blank; the first element is the program to run, e.g. "
            '["python", "train.py"]',
            field,
        )
    total = 0
    for i, arg in enumerate(command):
        _nul(arg, f"{field}[{i}]")
        size = len(arg.encode("utf-8", "surrogatepass")) + 1
        if limits.arg_strlen_max is not None and size > limits.arg_strlen_max:
            raise ValidationError(
                f"{field}[{i}] is {size - 1} bytes; the operating system accepts at most "
                f"{limits.arg_strlen_max - 1} bytes per argument; pass large data in a file",
                field,
            )
        total += size + POINTER_BYTES
    for key, value in (env or {}).items():
        _nul(key, f"env[{key!r}]")
        _nul(value, f"env[{key!r}]")
        size = len(f"{key}={value}".encode("utf-8", "surrogatepass")) + 1
        if limits.arg_strlen_max is not None and size > limits.arg_strlen_max:
            raise ValidationError(
                f"env[{key!r}] is {size - 1} bytes; the operating system accepts at most "
                f"{limits.arg_strlen_max - 1} bytes per variable",
                "env",
            )
        total += size + POINTER_BYTES
    if total > limits.argv_budget:
        raise ValidationError(
            f"{field} is {total} bytes in all; the operating system accepts at most "
            f"{limits.argv_budget} bytes of arguments here (ARG_MAX {limits.arg_max} less room "
            "for the environment); pass large data in a file",
            field,
        )


#: Variables that gpupool itself sets to bind and limit the GPUs it granted: a workload may
#: not declare them (gpupool's own values win anyway; refusing says so instead of ignoring).
GPU_ENV_PREFIXES = ("GPUPOOL_", "CUDA_MPS_")
GPU_ENV_NAMES = frozenset({"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"})
#: Variables that steer the dynamic loader (``LD_PRELOAD``, ``LD_LIBRARY_PATH``, ``LD_AUDIT``,
#: ``GLIBC_TUNABLES``, ...) or Slurm's commands (``SBATCH_GRES``, ``SLURM_CONF``, ...).
#: No engine lets them reach a process gpupool runs itself (security review F1); refusing
#: them on every engine is defence in depth, and one rule everywhere.
STEERING_ENV_PREFIXES = ("LD_", "SBATCH_", "SLURM_", "SALLOC_", "SRUN_")
STEERING_ENV_NAMES = frozenset({"GLIBC_TUNABLES"})
#: Every name a workload may not declare (the hub's spawners drop these from their own
#: environment before they submit).
RESERVED_ENV_PREFIXES = GPU_ENV_PREFIXES + STEERING_ENV_PREFIXES
RESERVED_ENV_NAMES = GPU_ENV_NAMES | STEERING_ENV_NAMES


def check_declared_env(env: Mapping[str, str], field: str = "env") -> None:
    """Raise ValidationError naming the first variable in `env` a workload may not declare:
    one gpupool sets itself, or one that steers the loader or Slurm; the message says what
    to do instead."""
    for name in env:
        if name in GPU_ENV_NAMES or name.startswith(GPU_ENV_PREFIXES):
            raise ValidationError(
                f"{field}[{name!r}] is set by gpupool to bind the GPUs it grants; remove it "
                "(ask for GPUs with gpus, gpu_fraction or a profile instead)",
                field,
            )
        if name.startswith("LD_") or name in STEERING_ENV_NAMES:
            raise ValidationError(
                f"{field}[{name!r}] steers the dynamic loader, which gpupool does not let a "
                "workload set from outside its command; set it inside the command instead, "
                'e.g. ["sh", "-c", "export LD_LIBRARY_PATH=/opt/lib; exec python train.py"]',
                field,
            )
        if name.startswith(STEERING_ENV_PREFIXES):
            raise ValidationError(
                f"{field}[{name!r}] steers Slurm, whose options (GPUs, account, nodes, time) "
                "gpupool alone chooses; remove it and ask for what you need in the workload "
                "(gpus, max_runtime_s, a profile); Slurm sets SLURM_* in the job itself",
                field,
            )
