"""`Idempotency-Key` on `POST /workloads`: a client that lost the answer to a submission (a
cut connection, a server restart) sends it again with the same key and gets the workload
it already made instead of a second one.

A key belongs to the user who sent it and is stored with the workload, in the same
transaction, so a submission either happened with its key or not at all. The same key with
the same request answers with the original workload (200, header `Idempotent-Replayed:
true`); the same key with a different request is refused (422). Keys stay bound to their
workload as long as it is on record.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gpupool.domain import ValidationError, Workload
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.server.schemas.convert import workload_out
from gpupool.server.schemas.workloads import WorkloadIn, WorkloadOut
from gpupool.server.services import workloads
from gpupool.store import WorkloadRepo
from gpupool.store.idempotency import IdempotencyRepo

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255
_KEY = re.compile(rf"[\x21-\x7e]{{1,{MAX_KEY_LENGTH}}}")  # visible ASCII, e.g. a UUID


@dataclass(frozen=True, slots=True)
class Idempotency:
    user: str
    key: str
    request_hash: str


def parse(user: str, key: str, body: WorkloadIn) -> Idempotency:
    """The key of `user`'s request `body`; ValidationError (422) for a malformed key."""
    if not _KEY.fullmatch(key):
        raise ValidationError(
            f"the {HEADER} header must be 1 to {MAX_KEY_LENGTH} visible ASCII characters "
            "without spaces; send a new UUID per submission",
            HEADER,
        )
    canonical = json.dumps(body.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return Idempotency(user, key, hashlib.sha256(canonical.encode()).hexdigest())


def _earlier(s: Session, idem: Idempotency) -> str | None:
    """The workload already submitted with this key; ValidationError if the key was used for
    a different request."""
    row = IdempotencyRepo(s).get(idem.user, idem.key)
    if row is None:
        return None
    if row.request_hash != idem.request_hash:
        raise ValidationError(
            f"{HEADER} {idem.key!r} was already used for a different submission (workload "
            f"{row.workload_id}); send a new key for a new request",
            HEADER,
        )
    return row.workload_id


def _replay(ctx: AppContext, idem: Idempotency) -> WorkloadOut | None:
    with ctx.store.read() as s:
        wid = _earlier(s, idem)
        return None if wid is None else workload_out(WorkloadRepo(s).record(wid))


def submit(
    ctx: AppContext, p: Principal, body: WorkloadIn, key: str | None
) -> tuple[WorkloadOut, bool]:
    """Submit `body` once per key: (the workload, whether it was made by this request)."""
    if key is None:
        return workloads.submit(ctx, p, body), True
    idem = parse(p.name, key, body)
    found = _replay(ctx, idem)
    if found is not None:
        return found, False

    def bind(s: Session, w: Workload) -> None:
        IdempotencyRepo(s).add(idem.user, idem.key, idem.request_hash, w.id, ctx.clock.now())

    try:
        return workloads.submit(ctx, p, body, on_insert=bind), True
    except IntegrityError:
        found = _replay(ctx, idem)  # a concurrent request with this key came first
        if found is None:
            raise
        return found, False
