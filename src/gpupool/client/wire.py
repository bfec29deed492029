"""What the sync and async clients share: the calls (method, path, body, answer model),
building a submission from keyword arguments, and reading answers and problem+json.
No I/O here; `sync.py` and `aio.py` send what these functions describe."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import pydantic
from pydantic import TypeAdapter

from gpupool import __version__
from gpupool.api.workloads import WorkloadIn
from gpupool.client.errors import (
    ApiError,
    IncompatibleServer,
    InvalidInput,
    ServerError,
    error_class,
)
from gpupool.domain import TERMINAL_STATES, WorkloadState

T = TypeVar("T")
API_PREFIX = "/api/v1"
#: the oldest server this client speaks to (the first whose /healthz names its version)
MIN_SERVER_VERSION = (0, 1, 0)
#: states in which a workload's run has ended for its submitter (`wait()`'s default); a
#: preempted one may run again later, but this run of it is over
ENDED = frozenset(TERMINAL_STATES | {WorkloadState.PREEMPTED})


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer (`parse`: JSON -> T)."""

    method: str
    path: str
    parse: Callable[[Any], T]
    params: Any = None
    json: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)


def seg(value: str) -> str:
    """`value` as one path segment (a tenant `lab/a` stays one segment)."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"give a non-empty name or id, not {value!r}")
    return quote(value, safe="")


def raw(data: Any) -> Any:
    return data


def model(tp: Any, what: str) -> Callable[[Any], Any]:
    """A parser of answers into `tp` (a model or `list[Model]`); an answer that does not fit
    raises IncompatibleServer (extra fields never do: models ignore them)."""
    adapter: TypeAdapter[Any] = TypeAdapter(tp)

    def parse(data: Any) -> Any:
        try:
            return adapter.validate_python(data)
        except pydantic.ValidationError as e:
            raise IncompatibleServer(
                f"the server's answer to {what} does not fit gpupool client {__version__} "
                f"({e.error_count()} problem(s), first: {_first(e)}); the server is probably "
                "an older or newer gpupool: call check_server() or upgrade the older side"
            ) from None

    return parse


def _first(e: pydantic.ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err["loc"]) or "the answer"
    return f"{where}: {err['msg']}"


_UNITS = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}


def parse_mib(text: str | int, what: str = "gpu_memory") -> int:
    """'20G', '512M', '1.5GiB' -> MiB; an int is MiB already."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise InvalidInput(f"{what}={text}: a size cannot be negative", what)
        return text
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT])(?:i?[bB])?\s*", str(text))
    if not m:
        raise InvalidInput(
            f"{what}={text!r}: give a size with a unit, e.g. '20G' or '512M' (or an int of MiB)",
            what,
        )
    return int(round(float(m.group(1)) * _UNITS[m.group(2).lower()]))


def workload_in(
    request: WorkloadIn | Mapping[str, Any] | None, fields: dict[str, Any]
) -> WorkloadIn:
    """A submission from a model, a mapping, or keyword arguments (`gpu_memory='20G'` and
    `memory='8G'` take sizes with units). Raises InvalidInput naming the field."""
    body: dict[str, Any] = {}
    if isinstance(request, WorkloadIn):
        if fields:
            return request.model_copy(update=_sizes(fields))
        return request
    if request is not None:
        body.update(request)
    body.update(_sizes(fields))
    try:
        return WorkloadIn.model_validate(body)
    except pydantic.ValidationError as e:
        raise InvalidInput(_invalid(e), _loc(e)) from None


def _sizes(fields: dict[str, Any]) -> dict[str, Any]:
    out = dict(fields)
    if "gpu_memory" in out:
        out["gpu_memory_mib"] = parse_mib(out.pop("gpu_memory"), "gpu_memory")
    if "memory" in out:
        out["memory_mib"] = parse_mib(out.pop("memory"), "memory")
    return out


def _loc(e: pydantic.ValidationError) -> str | None:
    loc = e.errors()[0]["loc"]
    return str(loc[0]) if loc else None


def _invalid(e: pydantic.ValidationError) -> str:
    parts = []
    for err in e.errors():
        where = ".".join(str(p) for p in err["loc"]) or "the request"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            known = ", ".join(sorted(WorkloadIn.model_fields))
            msg = f"not a field of a workload; the fields are {known}"
        parts.append(f"{where}: {msg}")
    return "invalid workload: " + "; ".join(parts)


def error_from(status: int, content: bytes, reason: str, headers: Mapping[str, str]) -> ApiError:
    """The typed error of a 4xx/5xx answer, with the server's problem+json `detail`."""
    import json

    problem: dict[str, Any] | None = None
    try:
        body = json.loads(content) if content else None
    except ValueError:
        body = None
    if isinstance(body, dict):
        problem = body
        message = str(body.get("detail") or body.get("title") or body)
        title = str(body.get("title") or "")
    else:
        message = content.decode(errors="replace").strip()[:300] or reason
        title = ""
    cls = error_class(status)
    retry = _retry_after(headers) if status in (429, 502, 503, 504) else None
    return cls(status, message, title, problem=problem, retry_after=retry)


def _retry_after(headers: Mapping[str, str]) -> float:
    try:
        value = float(headers.get("retry-after", "1"))
    except ValueError:
        return 1.0
    return max(0.0, value) if math.isfinite(value) else 1.0


def retryable(e: ApiError) -> bool:
    """Whether a submission that failed with `e` may be sent again (same Idempotency-Key)."""
    return isinstance(e, ServerError) and e.retry_after is not None


def version_of(url: str, status: int, body: Any) -> str:
    """The server version from GET /healthz; IncompatibleServer if it is not gpupool or
    older than MIN_SERVER_VERSION."""
    if status != 200 or not isinstance(body, dict) or body.get("status") != "ok":
        raise IncompatibleServer(
            f"{url} does not answer like a gpupool server (GET /healthz: HTTP {status}); "
            "check GPUPOOL_URL (or url=): it should be the address `gpupool up` printed"
        )
    version = body.get("version")
    if not isinstance(version, str):
        raise IncompatibleServer(
            f"the gpupool server at {url} is older than this client supports (its /healthz "
            f"names no version; gpupool client {__version__} needs a server of "
            f"{'.'.join(map(str, MIN_SERVER_VERSION))} or later): upgrade the server, or use "
            "the client of the server's version"
        )
    if _tuple(version) < MIN_SERVER_VERSION:
        raise IncompatibleServer(
            f"the gpupool server at {url} is version {version}; gpupool client {__version__} "
            f"needs {'.'.join(map(str, MIN_SERVER_VERSION))} or later: upgrade the server, or "
            "use the client of the server's version"
        )
    return version


def _tuple(version: str) -> tuple[int, ...]:
    nums = []
    for part in version.split(".")[:3]:
        m = re.match(r"\d+", part)
        nums.append(int(m.group()) if m else 0)
    return tuple(nums)


def ended(state: str, until: frozenset[str]) -> bool:
    return state in until


def states(until: str | WorkloadState | Any) -> frozenset[str]:
    """`wait(until=...)`: one state or several, checked against the known states."""
    items = [until] if isinstance(until, str) else list(until)
    known = {s.value for s in WorkloadState}
    bad = [s for s in items if str(s) not in known]
    if bad or not items:
        raise InvalidInput(
            f"until={until!r}: give one or more of {', '.join(sorted(known))}", "until"
        )
    return frozenset(str(s) for s in items)
