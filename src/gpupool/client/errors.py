"""What the client raises. Every error is a `GpupoolError` whose message says what to do;
the client never prints and never exits.

A refused request is an `ApiError` carrying the server's problem+json: `status`, `title`,
`message` (the server's `detail`, verbatim) and the whole `problem`. Subclasses by status let
callers catch what they handle (`NotFound`, `Conflict`, ...).
"""

from __future__ import annotations

from typing import Any


class GpupoolError(Exception):
    """Base of every error of `gpupool.client`."""


class InvalidInput(GpupoolError, ValueError):
    """Bad input caught before anything was sent (a malformed memory size, a request the
    models refuse). `field`: the argument at fault, when one is."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class ConfigError(GpupoolError):
    """The configuration file cannot be read, or no token is configured."""


class WaitTimeout(GpupoolError, TimeoutError):
    """A wait ended before the workload reached a state asked for. `last`: the workload as
    last seen."""

    def __init__(self, message: str, last: Any = None) -> None:
        super().__init__(message)
        self.last = last


class IncompatibleServer(GpupoolError):
    """The server is not gpupool, or an older gpupool than this client needs."""


class ApiError(GpupoolError):
    """The server refused a request. `message`: its problem+json `detail`; `retry_after`:
    seconds after which the same request may succeed (None: retrying will not help)."""

    def __init__(
        self,
        status: int,
        message: str,
        title: str = "",
        *,
        problem: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.title = title
        self.problem = problem
        self.retry_after = retry_after


class BadRequest(ApiError):
    """400 or 422: the request is malformed or refused as given (`problem["errors"]` names
    the fields)."""


class Unauthorized(ApiError):
    """401: no token, or a bad, expired or revoked one."""


class Forbidden(ApiError):
    """403: the token's user may not do this."""


class NotFound(ApiError):
    """404: no such workload, tenant, node, ..."""


class Conflict(ApiError):
    """409: the request conflicts with the current state (an Idempotency-Key reused for
    another body, a workload that has already ended, ...)."""


class TooManyRequests(ApiError):
    """429: throttled; `retry_after` says when to try again."""


class ServerError(ApiError):
    """5xx: the server failed; 502/503/504 carry `retry_after`."""


class Unreachable(ServerError):
    """The server could not be reached at all (status 503, as a proxy would answer)."""

    def __init__(self, url: str, why: str) -> None:
        super().__init__(
            503,
            f"the gpupool server at {url} is not reachable ({why}); check that gpupool is "
            "running and that GPUPOOL_URL (or url=) points at it",
            "Unreachable",
            retry_after=1.0,
        )
        self.url = url
        self.why = why


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    422: BadRequest,
    429: TooManyRequests,
}


def error_class(status: int) -> type[ApiError]:
    """The `ApiError` subclass for an HTTP status."""
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, ApiError)
