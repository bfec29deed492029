"""Start retries: what happens to admitted work the executor could not launch.

A start error must never block other work. `StartRetryPolicy.after_failure` decides, for one
failed start, whether the workload fails now (the error is permanent, or it has used up its
tries) or waits: it goes back to `pending` but is not considered again before `retry_at`,
doubling the wait each time, so work behind it is admitted meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from gpupool.domain.errors import ValidationError


@dataclass(frozen=True, slots=True)
class StartOutcome:
    """The decision for one failed start.

    `attempts` counts the failed starts in a row, this one included. `retry_at` is None when
    the workload fails now; `reason` says what happened and, for a retry, when it is.
    """

    attempts: int
    retry_at: float | None
    reason: str

    @property
    def gives_up(self) -> bool:
        return self.retry_at is None


def clock_time(t: float) -> str:
    """`t` (seconds since the epoch) as HH:MM:SS UTC, for reasons."""
    return datetime.fromtimestamp(t, UTC).strftime("%H:%M:%S UTC")


@dataclass(frozen=True, slots=True)
class StartRetryPolicy:
    """max_attempts: failed starts in a row before the workload fails (1: never retry).
    backoff_s: the wait after the first failure; it doubles after each, up to max_backoff_s."""

    max_attempts: int = 5
    backoff_s: float = 10.0
    max_backoff_s: float = 300.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValidationError("start retries: max_attempts must be >= 1", "max_attempts")
        if not 0 <= self.backoff_s <= self.max_backoff_s:
            raise ValidationError(
                "start retries: need 0 <= backoff_s <= max_backoff_s", "backoff_s"
            )

    def wait_s(self, attempts: int) -> float:
        """The wait after the `attempts`-th failed start in a row."""
        return min(self.backoff_s * 2 ** max(attempts - 1, 0), self.max_backoff_s)

    def after_failure(
        self, previous_attempts: int, error: str, *, permanent: bool, now: float
    ) -> StartOutcome:
        """Decide after a failed start; `previous_attempts` failed in a row before it."""
        attempts = previous_attempts + 1
        if permanent:
            return StartOutcome(attempts, None, f"could not start: {error}")
        if attempts >= self.max_attempts:
            return StartOutcome(
                attempts,
                None,
                f"could not start after {attempts} attempts; giving up: {error}",
            )
        at = now + self.wait_s(attempts)
        return StartOutcome(
            attempts,
            at,
            f"could not start (attempt {attempts} of {self.max_attempts}): {error}; "
            f"retrying after {clock_time(at)}",
        )


def backing_off(retry_at: float | None, now: float) -> bool:
    """Whether pending work must not be considered yet (its last start failed)."""
    return retry_at is not None and now < retry_at


def retry_reason(attempts: int, retry_at: float, max_attempts: int) -> str:
    """Why-pending of work that waits to retry its start (when its failure reason is gone)."""
    return (
        f"could not start (attempt {attempts} of {max_attempts}); "
        f"retrying after {clock_time(retry_at)}"
    )
