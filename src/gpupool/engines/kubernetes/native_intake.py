"""Queueing what the webhook held: the workload of a kubectl-applied Pod or Job is made when
the watch sees the STORED object (which the API server authenticated and admitted through
gpupool's webhook), never at review time (docs/kubernetes.md, "Submitting with kubectl").

`Intake.run(objects)` (each reconciler pass, from the watches' caches) looks at every held
object (a gated Pod, a suspended Job) labelled `gpupool.dev/native-workload`:

- its mark verifies (native_sign.py): it is submitted (`submit`, the API's own checks) as
  the signed submitter, with the signed workload id, so submitting it again (after a crash,
  on every pass until it is seen queued) makes nothing new;
- its mark does not verify (created while the webhook was off with `failurePolicy: Ignore`,
  its gpupool.dev annotations edited while the webhook was off, or copied): it is not
  queued and stays held; a Warning Event `NotQueued` says why and what to do. No user's
  name is trusted from it, and it holds no GPU while gated;
- the API refuses it now (a limit lowered since its review, the submitter's pending cap): a
  Warning Event `Refused` with the API's reason; it is tried again after `retry_s` (the
  Event is written again only when the reason changes).

A pass takes one `submitter()` (EngineEnv.submitter): its submissions share what the API's
checks read (every node, read once per pass, at the first submission that checks; the next
pass reads them again, so a node added meanwhile is seen). One pass submits for at most
`budget_s` on `clock`; the rest wait for the next pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from gpupool.clock import Clock
from gpupool.domain import DomainError, Tenant
from gpupool.engines.common.engine import EngineError, ExternalAnswer, ExternalWork
from gpupool.engines.kubernetes import native
from gpupool.engines.kubernetes.native_sign import Signer, Unsigned
from gpupool.engines.kubernetes.webhook import tenant_namespaces, work_of

Submit = Callable[[ExternalWork], ExternalAnswer]
#: (object, Event reason, message): a Warning Event on the object
Warn = Callable[[Mapping[str, Any], str, str], None]


def ref_of(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{obj.get('kind')}/{meta.get('namespace')}/{meta.get('name')}"


class Intake:
    """See the module docstring. `queued` holds the workload ids known to be made."""

    def __init__(
        self,
        submitter: Callable[[], Submit],
        tenants: Callable[[], Sequence[Tenant]],
        prefix: str,
        signer: Signer,
        warn: Warn,
        clock: Clock,
        *,
        engine: str = "kubernetes",
        budget_s: float = 1.0,
        retry_s: float = 60.0,
    ):
        self.submitter, self.tenants, self.prefix = submitter, tenants, prefix
        self.signer, self.warn, self.engine = signer, warn, engine
        self.clock, self.budget_s, self.retry_s = clock, budget_s, retry_s
        self.queued: set[str] = set()
        #: object uid -> (resourceVersion, why it is not queued) for a mark that failed
        self._unsigned: dict[str, tuple[str, str]] = {}
        #: workload id -> (the reason last written, when it was refused)
        self._refused: dict[str, tuple[str, float]] = {}

    def run(self, objects: Sequence[Mapping[str, Any]]) -> list[str]:
        """Queue what is new (see the module docstring); the workload ids made now."""
        fresh = [
            o
            for o in objects
            if native.held(o) and _label(o) and _label(o) not in self.queued and native.candidate(o)
        ]
        present = {str((o.get("metadata") or {}).get("uid") or "") for o in objects}
        self._unsigned = {u: v for u, v in self._unsigned.items() if u in present}
        if not fresh:
            return []
        spaces = tenant_namespaces(self.tenants(), self.prefix)
        submit = self.submitter()  # this pass's: the nodes are read once for all of it
        made: list[str] = []
        start = self.clock.now()
        for obj in fresh:
            if self.clock.now() - start > self.budget_s:
                break  # the rest next pass: the reconciler's other work waits meanwhile
            meta = obj.get("metadata") or {}
            ns, uid, rv = (str(meta.get(k) or "") for k in ("namespace", "uid", "resourceVersion"))
            tenant = spaces.get(ns)
            if tenant is None:
                continue  # no tenant's namespace (any more): not gpupool's
            if uid in self._unsigned and self._unsigned[uid][0] == rv:
                continue  # unchanged since its mark failed
            try:
                claim = self.signer.verify(obj)
                ask = native.ask_of(obj, ns, tenant)
            except (Unsigned, native.Refusal) as e:
                self._unsigned[uid] = (rv, str(e))
                self.warn(
                    obj,
                    "NotQueued",
                    f"not queued by gpupool: {e}; delete it and create it again with "
                    'gpupool\'s webhook on (docs/kubernetes.md, "Submitting with kubectl")',
                )
                continue
            said, at = self._refused.get(claim.workload_id, ("", -self.retry_s))
            if self.clock.now() - at < self.retry_s:
                continue  # refused a moment ago: others' turn
            work = work_of(ask, tenant, claim.submitter, self.engine)
            try:
                submit(_with_id(work, claim.workload_id))
            except EngineError:
                return made  # gpupool is starting or stopping: the next pass tries again
            except DomainError as e:  # the API's refusal, in its words
                self._refused[claim.workload_id] = (str(e), self.clock.now())
                if said != str(e):
                    self.warn(obj, "Refused", f"not queued by gpupool: {e}")
                continue
            self.queued.add(claim.workload_id)
            self._refused.pop(claim.workload_id, None)
            made.append(claim.workload_id)
        return made

    def forget(self, workload_ids: Collection[str]) -> None:
        """Workloads whose objects are gone."""
        for wid in workload_ids:
            self.queued.discard(wid)
            self._refused.pop(wid, None)


def _label(obj: Mapping[str, Any]) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(native.NATIVE) or "")


def _with_id(work: ExternalWork, workload_id: str) -> ExternalWork:
    return dataclasses.replace(work, workload_id=workload_id)
