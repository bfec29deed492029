"""`AsyncClient`: `Client` (sync.py) for asyncio (notebooks, JupyterHub): the same methods,
awaited; iterators are async iterators.

    async with AsyncClient() as gp:
        w = await gp.submit(gpus=1, command=["python3", "train.py"])
        w = await gp.wait(w.id, timeout_s=3600)

Answers are the API's models (`gpupool.api`); refusals raise `ApiError` subclasses with the
server's message; nothing here prints or exits (docs/python.md).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from datetime import date
from types import TracebackType
from typing import Any, Literal, TypeVar

import httpx

from gpupool.api.agents import NodeReportAck, NodeReportIn
from gpupool.api.budgets import (
    BudgetIn,
    BudgetOut,
    ChargebackOut,
    ReservationIn,
    ReservationOut,
)
from gpupool.api.cluster import GpuOut, NodeOut
from gpupool.api.nodepools import NodePoolIn, NodePoolOut, NodePoolPatchIn
from gpupool.api.tenancy import LoginOut, MeOut, TenantOut, TokenSecretOut, UserOut
from gpupool.api.workloads import (
    LogsOut,
    PendingOut,
    ProfileOut,
    QueueEntryOut,
    UsageReportOut,
    WorkloadDetailOut,
    WorkloadIn,
    WorkloadOut,
)
from gpupool.client import calls, wire
from gpupool.client.config import load_config
from gpupool.client.errors import (
    ApiError,
    IncompatibleServer,
    InvalidInput,
    NotFound,
    Unreachable,
    WaitTimeout,
)
from gpupool.client.wire import API_PREFIX, ENDED, Call

T = TypeVar("T")
#: called before a submission is sent again: (the error, seconds until it is)
OnRetry = Callable[[ApiError, float], None]


class AsyncClient:
    """One server, one token. `url`/`token` default to GPUPOOL_URL/GPUPOOL_TOKEN, else the
    file `gpupool login` writes. `sleep`/`monotonic`: the clock of `wait()` and of retries
    (tests pass their own). Cheap to create; close it (or use `with`)."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout_s: float = 30.0,
        submit_tries: int = 4,
        retry_max_wait_s: float = 8.0,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if url is None or token is None:
            cfg = load_config()
            url = url or cfg.url
            token = token if token is not None else cfg.token
        if not url.startswith(("http://", "https://")):
            raise InvalidInput(
                f"url={url!r}: give the server's address with its scheme, e.g. "
                "http://127.0.0.1:8000",
                "url",
            )
        self.url = url.rstrip("/")
        self.token = token or None
        self.submit_tries = max(1, submit_tries)
        self.retry_max_wait_s = retry_max_wait_s
        self._sleep = sleep
        self._monotonic = monotonic
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(
            base_url=self.url + API_PREFIX, headers=headers, timeout=timeout_s, transport=transport
        )

    # -- plumbing ------------------------------------------------------------------------

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Any call of /api/v1 (`path` below it); the answer's JSON as sent (None for an empty
        answer). Raises ApiError (refused) or Unreachable."""
        try:
            r = await self._http.request(method, path, params=params, json=json, headers=headers)
        except httpx.HTTPError as e:
            raise Unreachable(
                self.url, f"{e.__class__.__name__}: {e}" if str(e) else e.__class__.__name__
            ) from None
        if r.status_code >= 400:
            raise wire.error_from(r.status_code, r.content, r.reason_phrase, r.headers)
        if r.status_code == 204 or not r.content:
            return None
        return r.json()

    async def _run(self, call: Call[T]) -> T:
        """Send `call` and read its answer. An answer that does not fit, or a 404 that is no
        problem+json, asks /healthz once: a server that is not gpupool, or an older one,
        is said as such (IncompatibleServer) rather than as the symptom."""
        try:
            data = await self.request(
                call.method, call.path, params=call.params, json=call.json, headers=call.headers
            )
            return call.parse(data)
        except IncompatibleServer:
            await self.check_server()
            raise
        except NotFound as e:
            if e.problem is None:
                await self.check_server()
            raise

    async def check_server(self) -> str:
        """The server's version; IncompatibleServer if it is not gpupool or too old."""
        try:
            r = await self._http.get(self.url + "/healthz")
        except httpx.HTTPError as e:
            raise Unreachable(self.url, str(e) or e.__class__.__name__) from None
        try:
            body = r.json()
        except ValueError:
            body = None
        return wire.version_of(self.url, r.status_code, body)

    # -- who I am ------------------------------------------------------------------------

    async def login(
        self, username: str, password: str, token_name: str = "sdk", *, client: str | None = None
    ) -> LoginOut:
        """A new token for `username` (`client`: the address of the person logging in, for
        the server's per-address throttle)."""
        return await self._run(calls.login(username, password, token_name, client))

    async def me(self) -> MeOut:
        return await self._run(calls.me())

    async def user(self, name: str) -> UserOut:
        return await self._run(calls.user(name))

    async def create_token(
        self, name: str, *, user: str | None = None, expires_in_s: float | None = None
    ) -> TokenSecretOut:
        """A new token (admins: for `user`); its secret is in the answer only."""
        return await self._run(calls.create_token(user, name, expires_in_s))

    async def revoke_token(self, token_id: str) -> None:
        await self._run(calls.revoke_token(token_id))

    # -- workloads -----------------------------------------------------------------------

    async def submit(
        self,
        request: WorkloadIn | Mapping[str, Any] | None = None,
        /,
        *,
        idempotency_key: str | None = None,
        service_token: str | None = None,
        on_retry: OnRetry | None = None,
        **fields: Any,
    ) -> WorkloadOut:
        """Submit a workload: a `WorkloadIn`, a mapping, or its fields as keywords
        (`gpus=1, command=[...]`; `gpu_memory='20G'`, `memory='8G'` take units). Sent with
        one Idempotency-Key, and sent again with it while the server cannot be reached or
        asks for a retry, so a lost answer never makes two workloads."""
        call = calls.submit(
            wire.workload_in(request, fields), idempotency_key or str(uuid.uuid4()), service_token
        )
        for attempt in range(1, self.submit_tries + 1):
            try:
                return await self._run(call)
            except ApiError as e:
                if not wire.retryable(e) or attempt == self.submit_tries:
                    raise
                wait = min(self.retry_max_wait_s, (e.retry_after or 1.0) * attempt)
                if on_retry is not None:
                    on_retry(e, wait)
                await self._sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    async def workload(self, workload_id: str) -> WorkloadDetailOut:
        """One workload with its events; `pending` says why it waits and `pending.wait.
        expected_start` when it is expected to start (when known)."""
        return await self._run(calls.workload(workload_id))

    async def workloads(
        self,
        *,
        user: str | None = None,
        state: str | list[str] | None = None,
        kind: str | None = None,
        tenant: str | None = None,
        limit: int = 100,
        mine: bool = False,
    ) -> list[WorkloadOut]:
        """Workloads I may see, newest first; `mine=True`: only mine."""
        if mine:
            user = (await self.me()).name
        return await self._run(calls.workloads(user, state, kind, tenant, limit))

    async def cancel(self, workload_id: str) -> WorkloadOut:
        """Cancel: queued work at once; running work is stopped, then cancelled."""
        return await self._run(calls.cancel(workload_id))

    async def logs(
        self, workload_id: str, *, tail: int | None = None, offset: int | None = None
    ) -> LogsOut:
        """The last `tail` lines, or one page of the log from byte `offset` (default 0)."""
        return await self._run(calls.logs(workload_id, tail, offset))

    async def log_pages(self, workload_id: str, offset: int = 0) -> AsyncIterator[LogsOut]:
        """The log from byte `offset` on, page by page, until a page brings nothing new
        (it comes last: its `note` is the latest)."""
        while True:
            page = await self.logs(workload_id, offset=offset)
            yield page
            if page.next_offset is None or page.next_offset == offset:
                return
            offset = page.next_offset

    async def follow(
        self, workload_id: str, *, poll_s: float = 1.0
    ) -> AsyncIterator[tuple[WorkloadDetailOut, str]]:
        """(the workload as now, the log text new since the last step), every `poll_s`, until
        its run ends (the last step has the final state and the last output)."""
        printed = 0
        while True:
            w = await self.workload(workload_id)
            text = []
            async for page in self.log_pages(workload_id, printed):
                text.append(page.text)
                printed = page.next_offset or printed
            yield w, "".join(text)
            if w.state in ENDED:
                return
            await self._sleep(poll_s)

    async def stream_logs(
        self, workload_id: str, *, follow: bool = True, poll_s: float = 1.0
    ) -> AsyncIterator[str]:
        """The log as it grows, chunk by chunk (`follow=False`: what there is now)."""
        if not follow:
            async for page in self.log_pages(workload_id):
                if page.text:
                    yield page.text
            return
        async for _, text in self.follow(workload_id, poll_s=poll_s):
            if text:
                yield text

    async def wait(
        self,
        workload_id: str,
        until: str | Iterable[str] = ENDED,
        *,
        timeout_s: float | None = None,
        poll_s: float = 1.0,
    ) -> WorkloadDetailOut:
        """Poll until the workload is in one of `until` (default: its run has ended);
        WaitTimeout after `timeout_s` (None: no limit)."""
        want = wire.states(until)
        if timeout_s is not None and not timeout_s >= 0:
            raise InvalidInput(f"timeout_s={timeout_s!r}: give seconds >= 0, or None", "timeout_s")
        deadline = None if timeout_s is None else self._monotonic() + timeout_s
        while True:
            w = await self.workload(workload_id)
            if w.state in want:
                return w
            if deadline is not None and self._monotonic() >= deadline:
                raise WaitTimeout(
                    f"{workload_id} is still {w.state} after {timeout_s:g} s (waiting for "
                    f"{', '.join(sorted(want))}); wait longer (timeout_s=) or see "
                    "workload(id).pending for why it waits",
                    w,
                )
            await self._sleep(poll_s)

    async def why_pending(
        self, workload_id: str, *, timeout_s: float = 30.0, poll_s: float = 0.5
    ) -> PendingOut | None:
        """Why the workload waits (`reason`; `wait.expected_start` when gpupool can bound
        it), once the scheduler has looked at it; None if it is not pending (any more).
        WaitTimeout if the scheduler has said nothing within `timeout_s`."""
        deadline = self._monotonic() + timeout_s
        while True:
            w = await self.workload(workload_id)
            if w.state != "pending" or w.pending is not None:
                return w.pending if w.state == "pending" else None
            if self._monotonic() >= deadline:
                raise WaitTimeout(
                    f"the scheduler has not said why {workload_id} waits within "
                    f"{timeout_s:g} s; is its loop running? (try again, or see gpupool queue)",
                    w,
                )
            await self._sleep(poll_s)

    async def queue(self, tenant: str | None = None) -> list[QueueEntryOut]:
        """Pending work in order, each with why it waits (`reason`, `wait`)."""
        return await self._run(calls.queue(tenant))

    async def usage(
        self,
        group_by: Literal["user", "tenant", "day"] = "tenant",
        *,
        from_: date | str | None = None,
        to: date | str | None = None,
        tenant: str | None = None,
        user: str | None = None,
    ) -> UsageReportOut:
        """GPU-hours allocated and busy, and efficiency, by user, tenant or day (UTC days)."""
        return await self._run(calls.usage(group_by, from_, to, tenant, user))

    # -- the pool ------------------------------------------------------------------------

    async def tenants(self) -> list[TenantOut]:
        return await self._run(calls.tenants())

    async def tenant(self, name: str) -> TenantOut:
        """One tenant, its quota and what it uses now."""
        return await self._run(calls.tenant(name))

    async def nodes(self) -> list[NodeOut]:
        return await self._run(calls.nodes())

    async def gpus(self) -> list[GpuOut]:
        return await self._run(calls.gpus())

    async def profiles(self) -> list[ProfileOut]:
        return await self._run(calls.profiles())

    async def node_pools(self) -> list[NodePoolOut]:
        """Node pools with their nodes' states and the requests for nodes in flight."""
        return await self._run(calls.node_pools())

    async def node_pool(self, name: str) -> NodePoolOut:
        return await self._run(calls.node_pool(name))

    async def create_node_pool(self, body: NodePoolIn) -> NodePoolOut:
        """Define a node pool (admins)."""
        return await self._run(calls.create_node_pool(body))

    async def update_node_pool(self, name: str, changes: NodePoolPatchIn) -> NodePoolOut:
        """Change the given fields of a node pool (admins)."""
        return await self._run(calls.update_node_pool(name, changes))

    async def delete_node_pool(self, name: str) -> None:
        """Delete a node pool whose nodes are all powered down (admins)."""
        await self._run(calls.delete_node_pool(name))

    async def report_node(
        self, node: str, report: NodeReportIn | Mapping[str, Any]
    ) -> NodeReportAck:
        """A node agent's report (with the node's credential as the token)."""
        return await self._run(calls.report_node(node, report))

    # -- budgets, reservations, chargeback (issue 35) ----------------------------------------

    async def budgets(self, tenant: str | None = None) -> list[BudgetOut]:
        """GPU-hour budgets and their use this period (admins; tenant-admins their own)."""
        return await self._run(calls.budgets(tenant))

    async def set_budget(self, body: BudgetIn) -> BudgetOut:
        """Set or replace the budget of (tenant, period, model) (admins)."""
        return await self._run(calls.set_budget(body))

    async def delete_budget(self, budget_id: int) -> None:
        await self._run(calls.delete_budget(budget_id))

    async def reservations(self, past: bool = False) -> list[ReservationOut]:
        """Advance reservations of the tenants you have a role in."""
        return await self._run(calls.reservations(past))

    async def add_reservation(self, body: ReservationIn) -> ReservationOut:
        """Book GPUs over a window (admins; tenant-admins within the guarantee)."""
        return await self._run(calls.add_reservation(body))

    async def delete_reservation(self, reservation_id: str) -> None:
        await self._run(calls.delete_reservation(reservation_id))

    async def chargeback(
        self,
        by: Literal["tenant", "user", "model"] = "tenant",
        *,
        from_: date | str | None = None,
        to: date | str | None = None,
        tenant: str | None = None,
    ) -> ChargebackOut:
        """GPU-hours allocated and busy, memory GiB-hours and energy per tenant, user or model."""
        return await self._run(calls.chargeback(by, from_, to, tenant))
