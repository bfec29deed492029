"""Process settings of the server, read once (from the environment or given by the caller)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gpupool.domain.retries import StartRetryPolicy
from gpupool.scheduler.types import SchedulerConfig
from gpupool.server.webhook import webhook_url


@dataclass(frozen=True, slots=True)
class Settings:
    """How the server runs. Domain configuration (tenants, quotas, sharing modes) lives in the
    database, not here.

    database_url: SQLAlchemy URL (SQLite file by default; PostgreSQL for clusters).
    token_ttl_s: lifetime of tokens issued by login (and the default for new tokens).
    max_body_bytes: larger request bodies are refused with 413.
    scheduler_interval_s: the scheduler loop also runs this often without being woken.
    scheduler_min_gap_s: passes woken by submissions start at least this far apart, so a
        burst of submissions is decided in one pass (it bounds the added admission delay).
    reconciler_interval_s: how often the reconciler compares the executor with the store.
    launch_grace_s: admitted work the executor still does not know this long after its
        admission was never launched (the server stopped between its decision and the start,
        e.g. a kubectl-applied Pod still gated): it is requeued. Longer than one scheduler
        pass's starts plus a reconciler interval (docs/admin-guide.md, "Restarts").
    start_loops: run the background loops while the app is serving (tests drive them by hand).
    stop_grace_s: time work gets between the polite stop signal and the forced kill.
    start_retry: what happens to admitted work the executor could not start: a permanent
        error fails it, a transient one requeues it after a growing wait, up to
        `max_attempts` failed starts in a row (docs/scheduler.md, "Start errors").
    api_threads: worker threads for the endpoints. They are CPU-bound and share one GIL, so
        a few serve as many requests as many would, with less switching, and leave the GIL to
        the scheduler loop more often (bench/results/api_load.md).
    password_threads: threads that check passwords (argon2, ~0.1 s of a core each); 0: half
        the CPUs. They never serve other requests.
    password_queue: password checks that may wait for those threads, each at most
        password_wait_s; more, or longer, are refused with 429 (a login flood cannot pile
        up, and its clients wait rather than spin).
    max_pending_per_user: pending workloads one user may have at once; a submit over it
        is refused with 429 (wait, or cancel some). Admins too. 0: no cap.
    mig_relayout: re-cut idle `mig` GPUs for waiting MIG requests no layout serves
        (gpupool.scheduler.mig_relayout), where the engine can change layouts; off by
        default (GPUPOOL_MIG_RELAYOUT=1).
    budget_webhook_url: where a spent GPU-hour budget is announced with a JSON POST, besides
        the `budget.spent` event (gpupool.server.webhook); None: no POST.
    metrics_token: the scrape token /metrics asks for (`Authorization: Bearer ...`); None:
        /metrics answers clients on this host only (gpupool.server.metrics_access).
    """

    database_url: str = "sqlite:///gpupool.db"
    token_ttl_s: float = 30 * 86400.0
    max_body_bytes: int = 1 << 20
    scheduler_interval_s: float = 2.0
    scheduler_min_gap_s: float = 0.1
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    reconciler_interval_s: float = 2.0
    launch_grace_s: float = 60.0
    start_loops: bool = True
    stop_grace_s: float = 30.0
    start_retry: StartRetryPolicy = field(default_factory=StartRetryPolicy)
    api_threads: int = 4
    password_threads: int = 0
    password_queue: int = 64
    password_wait_s: float = 2.0
    cookie_name: str = "gpupool_session"
    cookie_secure: bool = False
    mig_relayout: bool = False
    max_pending_per_user: int = 1000
    budget_webhook_url: str | None = field(default=None, repr=False)  # may hold a token
    metrics_token: str | None = field(default=None, repr=False)

    @staticmethod
    def from_env(environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Settings from `GPUPOOL_*` variables (GPUPOOL_DATABASE_URL, GPUPOOL_TOKEN_TTL_S,
        GPUPOOL_MAX_BODY_BYTES, GPUPOOL_SCHEDULER_INTERVAL_S, GPUPOOL_STOP_GRACE_S,
        GPUPOOL_API_THREADS, GPUPOOL_PASSWORD_THREADS, GPUPOOL_PASSWORD_QUEUE,
        GPUPOOL_PASSWORD_WAIT_S, GPUPOOL_MAX_PENDING_PER_USER, GPUPOOL_COOKIE_SECURE,
        GPUPOOL_LAUNCH_GRACE_S, GPUPOOL_BUDGET_WEBHOOK_URL, GPUPOOL_METRICS_TOKEN,
        GPUPOOL_START_MAX_ATTEMPTS,
        GPUPOOL_START_BACKOFF_S, GPUPOOL_START_MAX_BACKOFF_S; the scheduler's
        GPUPOOL_RECLAIM_AFTER_S, GPUPOOL_MIN_RUNTIME_S, GPUPOOL_SERVICE_LEVELS_S, ..., see
        `scheduler_from_env`), then `overrides`."""
        env = os.environ if environ is None else environ
        s = Settings()
        values: dict[str, object] = {}
        if "GPUPOOL_DATABASE_URL" in env:
            values["database_url"] = env["GPUPOOL_DATABASE_URL"]
        if env.get("GPUPOOL_BUDGET_WEBHOOK_URL", "").strip():
            values["budget_webhook_url"] = webhook_url(env["GPUPOOL_BUDGET_WEBHOOK_URL"])
        if env.get("GPUPOOL_METRICS_TOKEN", "").strip():
            values["metrics_token"] = env["GPUPOOL_METRICS_TOKEN"].strip()
        for key, conv in (
            ("token_ttl_s", float),
            ("max_body_bytes", int),
            ("scheduler_interval_s", float),
            ("scheduler_min_gap_s", float),
            ("stop_grace_s", float),
            ("api_threads", int),
            ("password_threads", int),
            ("password_queue", int),
            ("password_wait_s", float),
            ("max_pending_per_user", int),
            ("launch_grace_s", float),
        ):
            name = "GPUPOOL_" + key.upper()
            if name in env:
                try:
                    values[key] = conv(env[name])
                except ValueError:
                    raise ValueError(f"{name}={env[name]!r} is not a number") from None
        retry: dict[str, object] = {}
        for key, conv in (
            ("max_attempts", int),
            ("backoff_s", float),
            ("max_backoff_s", float),
        ):
            name = "GPUPOOL_START_" + key.upper()
            if name in env:
                try:
                    retry[key] = conv(env[name])
                except ValueError:
                    raise ValueError(f"{name}={env[name]!r} is not a number") from None
        if retry:
            values["start_retry"] = replace(s.start_retry, **retry)  # type: ignore[arg-type]
        for key in ("cookie_secure", "mig_relayout"):
            name = "GPUPOOL_" + key.upper()
            if name in env:
                values[key] = _on_off(env, name)
        sched = scheduler_from_env(env)
        if sched:
            values["scheduler"] = replace(s.scheduler, **sched)  # type: ignore[arg-type]
        values.update(overrides)
        return replace(s, **values)  # type: ignore[arg-type]


_ON = ("on", "true", "yes", "1")
_OFF = ("off", "false", "no", "0")


def _on_off(env: Mapping[str, str], name: str) -> bool:
    """A switch: on/true/yes/1 or off/false/no/0; anything else is an error, never a silent
    off (GPUPOOL_COOKIE_SECURE=on must not leave the cookie without its Secure flag)."""
    text = env[name].strip().lower()
    if text not in _ON + _OFF:
        raise ValueError(f"{name}={env[name]!r}: give on or off")
    return text in _ON


def _positive_list(name: str, value: str, hint: str) -> tuple[float, ...]:
    """Comma-separated numbers above 0, sorted; `off`, `none` or empty: ()."""
    text = value.strip()
    if text.lower() in ("", "off", "none"):
        return ()
    try:
        numbers = tuple(sorted(float(x) for x in text.split(",")))
    except ValueError:
        raise ValueError(f"{name}={text!r}: give {hint}, or off") from None
    if any(not 0 < x < float("inf") for x in numbers):
        raise ValueError(f"{name}={text!r}: the numbers must be above 0")
    return numbers


def _whole(name: str, value: str, hint: str) -> int:
    """A whole number, 1 or more."""
    text = value.strip()
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{name}={text!r}: give {hint}")
    return int(text)


def scheduler_from_env(env: Mapping[str, str]) -> dict[str, object]:
    """SchedulerConfig fields from GPUPOOL_RECLAIM_AFTER_S, GPUPOOL_MIN_RUNTIME_S (seconds),
    GPUPOOL_SERVICE_LEVELS_S (thresholds in GPU-seconds, comma-separated, e.g.
    `1800,18000`; `off` or empty turns service levels off), GPUPOOL_SERVICE_LEVELS_RELATIVE
    (multiples of the pool's run-length scale, comma-separated, e.g. `0.2,2,20`; `off` or
    empty: the absolute levels only), GPUPOOL_SERVICE_LEVELS_QUANTILE (the run-length
    quantile that is the scale, above 0 and at most 1), GPUPOOL_SERVICE_LEVELS_HYSTERESIS (a
    factor, 1 or more), GPUPOOL_SERVICE_LEVELS_WINDOW (recently started workloads, a whole
    number, 1 or more), GPUPOOL_PREEMPT_LEVELS_APART (a whole number, 1 or more),
    GPUPOOL_SERVICE_LEVELS_SIBLINGS_S (seconds, 0: off), GPUPOOL_DEFRAG_MOVES,
    GPUPOOL_RECLAIM_CHECKPOINTING_AT_ONCE, GPUPOOL_GANG_HOLD_BACKFILL,
    GPUPOOL_GANG_CLEARS_NODES, GPUPOOL_SERVICE_LEVELS_FINE_ORDER and
    GPUPOOL_RECLAIM_CHECKPOINTING_BY_SERVICE (`on` or `off`). A bad value raises ValueError
    naming the variable and what it takes."""
    out: dict[str, object] = {}
    for key in ("reclaim_after_s", "min_runtime_s", "service_levels_siblings_s"):
        name = "GPUPOOL_" + key.upper()
        if name in env:
            try:
                v = float(env[name])
            except ValueError:
                raise ValueError(f"{name}={env[name]!r} is not a number of seconds") from None
            if v < 0:
                raise ValueError(f"{name}={env[name]!r} must be 0 or more")
            out[key] = v
    for key, hint in (
        ("service_levels_s", "GPU-second thresholds separated by commas (e.g. 1800,18000,180000)"),
        (
            "service_levels_relative",
            "multiples of the pool's run-length scale separated by commas (e.g. 0.2,2,20)",
        ),
    ):
        name = "GPUPOOL_" + key.upper()
        if name in env:
            out[key] = _positive_list(name, env[name], hint)
    for key, what, ok in (
        ("quantile", "a quantile above 0 and at most 1 (e.g. 0.8)", lambda v: 0 < v <= 1),
        ("hysteresis", "a factor of 1 or more (e.g. 1.5)", lambda v: 1 <= v < float("inf")),
    ):
        name = "GPUPOOL_SERVICE_LEVELS_" + key.upper()
        if name in env:
            try:
                v = float(env[name])
            except ValueError:
                v = float("nan")
            if not ok(v):
                raise ValueError(f"{name}={env[name]!r}: give {what}")
            out["service_levels_" + key] = v
    for key, hint in (
        (
            "service_levels_window",
            "a whole number of recently started workloads, 1 or more (e.g. 5000)",
        ),
        (
            "preempt_levels_apart",
            "a whole number of levels, 1 or more (1: any higher level; 2, the default, skips "
            "the next one)",
        ),
    ):
        name = "GPUPOOL_" + key.upper()
        if name in env:
            out[key] = _whole(name, env[name], hint)
    for key in (
        "defrag_moves",
        "reclaim_checkpointing_at_once",
        "gang_hold_backfill",
        "gang_clears_nodes",
        "service_levels_fine_order",
        "reclaim_checkpointing_by_service",
    ):
        name = "GPUPOOL_" + key.upper()
        if name in env:
            out[key] = _on_off(env, name)
    return out
