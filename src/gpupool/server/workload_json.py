"""Memoised JSON of workload rows for the hot polling endpoints (GET /workloads, GET /queue).

A workload's JSON is a pure function of its stored row (plus its allocation while it is
active), and the rows polled most — a user's recent work, the queue — rarely change between
two polls. `WorkloadJSONMemo` memoises each row's JSON object keyed by *all* the row's values:
a row that changed is a new key, so a memoised object is never stale, and nothing has to be
invalidated. The attained service of work that holds GPUs grows with time, and what work
kept from earlier attempts is not in its row: both are added outside the memo
(`with_attained`). The objects equal `WorkloadOut.model_dump(mode="json")` (a test holds them to
it), so the API's schema stays the one pydantic documents.

Contract: the returned dicts are shared between responses and must not be mutated; callers
build new dicts around them (`with_allocation`, `with_attained`, `queue_entry`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from fastapi import Response

from gpupool.domain import Allocation
from gpupool.scheduler.waits import PlannedPreemption
from gpupool.server.schemas.convert import allocation_out, preemption_out, workload_out
from gpupool.store import ROW_KEYS, attempt_milli_s, gpu_hours, record_of

_COMMAND = ROW_KEYS.index("command")

#: JSON object of one workload (as WorkloadOut dumps it)
JSONObject = dict[str, Any]
#: a memo entry: the object, and the attained service its row alone tells (milli-GPU-s)
_Entry = tuple[JSONObject, float]


class WorkloadJSONMemo:
    """Memo of workload JSON objects by row value; at most `max_entries` (then it starts
    afresh: the polled rows come back on the next request). Safe to share between threads."""

    def __init__(self, max_entries: int = 50_000):
        self.max_entries = max_entries
        self._memo: dict[tuple[Any, ...], _Entry] = {}
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def workload(self, row: Sequence[Any], kept: Mapping[str, float] | None = None) -> JSONObject:
        """The JSON object of the workload stored in `row` (a plain row from
        `WorkloadRepo.rows`), without its allocation (`"allocation": null`). `kept`: the
        attained service workloads kept from earlier attempts (gpupool.store.kept_service);
        needed for pending work only (work that holds GPUs: `workloads`)."""
        obj, attempt = self._entry(row)
        k = kept.get(obj["id"]) if kept else None
        return obj if not k else with_attained(obj, k + attempt)

    def _entry(self, row: Sequence[Any]) -> _Entry:
        """The memoised object of `row` and what its row alone says it attained
        (gpupool.store.attempt_milli_s without an allocation)."""
        command = row[_COMMAND]
        key = (*row[:_COMMAND], tuple(command or ()), *row[_COMMAND + 1 :])
        found = self._memo.get(key)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        rec = record_of(row)
        attempt = attempt_milli_s(rec.workload)
        entry = (workload_out(rec, attained_milli_s=attempt).model_dump(mode="json"), attempt)
        with self._lock:
            if len(self._memo) >= self.max_entries:
                self._memo.clear()
            self._memo[key] = entry
        return entry

    def workloads(
        self,
        rows: Sequence[Sequence[Any]],
        allocations: Mapping[str, Allocation],
        now: float,
        kept: Mapping[str, float] | None = None,
    ) -> list[JSONObject]:
        """JSON objects of `rows`, each with its active allocation from `allocations` and
        its attained service at `now` (with what it `kept`, gpupool.store.kept_service)."""
        out = []
        for row in rows:
            obj, attempt = self._entry(row)
            a = allocations.get(obj["id"])
            extra = kept.get(obj["id"], 0.0) if kept else 0.0
            if a is not None:
                obj = with_allocation(obj, a)
                extra += max(0.0, now - a.since) * a.gpu_milli
            out.append(obj if not extra else with_attained(obj, attempt + extra))
        return out


def with_allocation(obj: JSONObject, a: Allocation) -> JSONObject:
    """A copy of a workload's JSON object that shows allocation `a`."""
    return {**obj, "allocation": allocation_out(a).model_dump(mode="json")}


def with_preemption(obj: JSONObject, plan: PlannedPreemption) -> JSONObject:
    """A copy of a workload's JSON object that shows its planned preemption (it is not in
    its row: it comes from the waits of pending work, gpupool.scheduler.waits)."""
    return {**obj, "preemption": preemption_out(plan).model_dump(mode="json")}


def with_attained(obj: JSONObject, milli_s: float) -> JSONObject:
    """A copy of a workload's JSON object that shows `milli_s` attained."""
    return {**obj, "attained_gpu_hours": gpu_hours(milli_s)}


def queue_entry(position: int, tenant_position: int, reason: str, obj: JSONObject) -> JSONObject:
    """One entry of GET /queue (as QueueEntryOut dumps it); `wait` is the workload's."""
    pending = obj.get("pending")
    return {
        "position": position,
        "tenant_position": tenant_position,
        "reason": reason,
        "wait": pending.get("wait") if pending else None,
        "forecast": pending.get("forecast") if pending else None,
        "workload": obj,
    }


def json_response(content: Any, status_code: int = 200) -> Response:
    """`content` (plain JSON values) encoded once, with orjson."""
    return Response(orjson.dumps(content), status_code, media_type="application/json")
