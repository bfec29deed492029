"""The environment a local job starts with: an allowlist, never the server's environment.

A job's environment is built from, in order (later wins):

1. the server's values of the **allowed** variables only: ``PATH``, ``LANG``, ``LANGUAGE``,
   ``LC_*``, ``TERM``, ``TZ``, plus any an admin names in ``GPUPOOL_JOB_ENV_PASS``
   (comma-separated, e.g. ``HTTP_PROXY,HTTPS_PROXY,NO_PROXY``; names starting with
   ``GPUPOOL_`` are never passed);
2. the account's ``HOME``, ``USER``, ``LOGNAME`` and ``SHELL``;
3. what the workload declares (the ``env`` given to ``start``);
4. gpupool's own variables, which nothing overrides: ``CUDA_VISIBLE_DEVICES`` (GPU UUIDs;
   empty for CPU-only work), ``GPUPOOL_WORKLOAD_ID``, ``GPUPOOL_GPU_MILLI``,
   ``GPUPOOL_JOB_MARKER`` and, for fractional shares under MPS, the ``CUDA_MPS_*`` variables.

Everything else the server has (``PGPASSWORD``, ``GPUPOOL_DATABASE_URL``, cloud keys, ...)
never reaches a job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpupool.engines.common.accounts import Account

ALLOWED = ("PATH", "LANG", "LANGUAGE", "TERM", "TZ")
ALLOWED_PREFIXES = ("LC_",)
PASS_SETTING = "GPUPOOL_JOB_ENV_PASS"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"


def passed_names(raw: str) -> tuple[str, ...]:
    """Extra variables an admin lets through (the GPUPOOL_JOB_ENV_PASS list), GPUPOOL_*
    excluded."""
    return tuple(
        n for n in (x.strip() for x in raw.split(",")) if n and not n.startswith("GPUPOOL_")
    )


def allowed(name: str, extra: Iterable[str] = ()) -> bool:
    return name in ALLOWED or name.startswith(ALLOWED_PREFIXES) or name in extra


def job_environment(
    server_env: Mapping[str, str],
    account: Account,
    *,
    declared: Mapping[str, str] | None = None,
    injected: Mapping[str, str],
    passed: Iterable[str] = (),
) -> dict[str, str]:
    """The environment of one job (see the module docstring); `passed`: the admin's extra
    names (`passed_names`)."""
    extra = tuple(n for n in passed if not n.startswith("GPUPOOL_"))
    env = {k: v for k, v in server_env.items() if allowed(k, extra)}
    env.setdefault("PATH", DEFAULT_PATH)
    env.update(HOME=account.home, USER=account.name, LOGNAME=account.name, SHELL=account.shell)
    env.update(declared or {})
    env.update(injected)
    return env
