"""The API's calls, one function each: what to send and the model its answer is read into.
`Client` (sync.py) and `AsyncClient` (aio.py) send them; keeping them here keeps the two
clients the same API."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date
from typing import Any, Literal

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
    ProfileOut,
    QueueEntryOut,
    UsageReportOut,
    WorkloadDetailOut,
    WorkloadIn,
    WorkloadOut,
)
from gpupool.client.errors import InvalidInput
from gpupool.client.wire import Call, model, seg

_W = "/workloads"


def login(username: str, password: str, token_name: str, client: str | None) -> Call[LoginOut]:
    body = {"username": username, "password": password, "token_name": token_name}
    headers = {"X-Forwarded-For": client} if client else {}
    return Call(
        "POST", "/auth/login", model(LoginOut, "POST /auth/login"), json=body, headers=headers
    )


def me() -> Call[MeOut]:
    return Call("GET", "/auth/me", model(MeOut, "GET /auth/me"))


def user(name: str) -> Call[UserOut]:
    return Call("GET", f"/users/{seg(name)}", model(UserOut, "GET /users/NAME"))


def create_token(user: str | None, name: str, expires_in_s: float | None) -> Call[TokenSecretOut]:
    body: dict[str, Any] = {"name": name, "expires_in_s": expires_in_s}
    if user is not None:
        body["user"] = user
    return Call("POST", "/tokens", model(TokenSecretOut, "POST /tokens"), json=body)


def revoke_token(token_id: str) -> Call[None]:
    return Call("DELETE", f"/tokens/{seg(token_id)}", lambda _: None)


def submit(body: WorkloadIn, key: str, service_token: str | None) -> Call[WorkloadOut]:
    headers = {"Idempotency-Key": key}
    if service_token:
        headers["X-Gpupool-Service-Token"] = service_token
    data = body.model_dump(mode="json", exclude_unset=True)
    return Call("POST", _W, model(WorkloadOut, "POST /workloads"), json=data, headers=headers)


def workload(workload_id: str) -> Call[WorkloadDetailOut]:
    return Call("GET", f"{_W}/{seg(workload_id)}", model(WorkloadDetailOut, "GET /workloads/ID"))


def workloads(
    user: str | None,
    state: str | list[str] | None,
    kind: str | None,
    tenant: str | None,
    limit: int,
) -> Call[list[WorkloadOut]]:
    params: list[tuple[str, Any]] = [("limit", limit)]
    for k, v in (("user", user), ("kind", kind), ("tenant", tenant)):
        if v:
            params.append((k, v))
    for s in [state] if isinstance(state, str) else state or []:
        params.append(("state", s))
    return Call("GET", _W, model(list[WorkloadOut], "GET /workloads"), params=params)


def cancel(workload_id: str) -> Call[WorkloadOut]:
    return Call("DELETE", f"{_W}/{seg(workload_id)}", model(WorkloadOut, "DELETE /workloads/ID"))


def logs(workload_id: str, tail: int | None, offset: int | None) -> Call[LogsOut]:
    if tail is not None and offset is not None:
        raise InvalidInput("give tail (the last lines) or offset (a page), not both", "tail")
    params = {"tail": tail} if tail is not None else {"offset": offset or 0}
    return Call(
        "GET",
        f"{_W}/{seg(workload_id)}/logs",
        model(LogsOut, "GET /workloads/ID/logs"),
        params=params,
    )


def queue(tenant: str | None) -> Call[list[QueueEntryOut]]:
    params = {"tenant": tenant} if tenant else {}
    return Call("GET", "/queue", model(list[QueueEntryOut], "GET /queue"), params=params)


def usage(
    group_by: Literal["user", "tenant", "day"],
    from_: date | str | None,
    to: date | str | None,
    tenant: str | None,
    user: str | None,
) -> Call[UsageReportOut]:
    if group_by not in ("user", "tenant", "day"):
        raise InvalidInput(f"group_by={group_by!r}: give 'user', 'tenant' or 'day'", "group_by")
    params = {"group_by": group_by} | _days(from_, to)
    for k, name in (("tenant", tenant), ("user", user)):
        if name:
            params[k] = name
    return Call("GET", "/usage", model(UsageReportOut, "GET /usage"), params=params)


def _days(from_: date | str | None, to: date | str | None) -> dict[str, str]:
    """The `from` and `to` query parameters of a report over days (those given), checked."""
    given = (("from", from_, "from_"), ("to", to, "to"))
    return {k: _day(v, what) for k, v, what in given if v is not None}


def _day(v: date | str, what: str) -> str:
    if isinstance(v, date):
        return v.isoformat()
    try:
        return date.fromisoformat(v).isoformat()
    except (TypeError, ValueError):
        raise InvalidInput(
            f"{what}={v!r}: give a day as YYYY-MM-DD or a datetime.date", what
        ) from None


def tenants() -> Call[list[TenantOut]]:
    return Call("GET", "/tenants", model(list[TenantOut], "GET /tenants"))


def tenant(name: str) -> Call[TenantOut]:
    # tenant names hold '/': the route takes the rest of the path
    if not name or not isinstance(name, str):
        raise InvalidInput(f"give a tenant name, e.g. 'lab-a' or 'lab/a', not {name!r}", "tenant")
    return Call("GET", f"/tenants/{name.strip('/')}", model(TenantOut, "GET /tenants/NAME"))


def nodes() -> Call[list[NodeOut]]:
    return Call("GET", "/nodes", model(list[NodeOut], "GET /nodes"))


def gpus() -> Call[list[GpuOut]]:
    return Call("GET", "/gpus", model(list[GpuOut], "GET /gpus"))


def profiles() -> Call[list[ProfileOut]]:
    return Call("GET", "/profiles", model(list[ProfileOut], "GET /profiles"))


def node_pools() -> Call[list[NodePoolOut]]:
    return Call("GET", "/node-pools", model(list[NodePoolOut], "GET /node-pools"))


def node_pool(name: str) -> Call[NodePoolOut]:
    return Call("GET", f"/node-pools/{seg(name)}", model(NodePoolOut, "GET /node-pools/NAME"))


def create_node_pool(body: NodePoolIn) -> Call[NodePoolOut]:
    data = body.model_dump(mode="json", exclude_unset=True)
    return Call("POST", "/node-pools", model(NodePoolOut, "POST /node-pools"), json=data)


def update_node_pool(name: str, changes: NodePoolPatchIn) -> Call[NodePoolOut]:
    data = changes.model_dump(mode="json", exclude_unset=True)
    return Call(
        "PATCH", f"/node-pools/{seg(name)}", model(NodePoolOut, "PATCH /node-pools/NAME"), json=data
    )


def delete_node_pool(name: str) -> Call[None]:
    return Call("DELETE", f"/node-pools/{seg(name)}", lambda _: None)


def report_node(node: str, report: NodeReportIn | Mapping[str, Any]) -> Call[NodeReportAck]:
    body = report.model_dump(mode="json") if isinstance(report, NodeReportIn) else dict(report)
    return Call(
        "POST",
        f"/nodes/{seg(node)}/report",
        model(NodeReportAck, "POST /nodes/NAME/report"),
        json=body,
    )


# -- budgets, reservations, chargeback (issue 35) --------------------------------------------


def budgets(tenant: str | None) -> Call[list[BudgetOut]]:
    params = {"tenant": tenant} if tenant else {}
    return Call("GET", "/budgets", model(list[BudgetOut], "GET /budgets"), params=params)


def set_budget(body: BudgetIn) -> Call[BudgetOut]:
    data = body.model_dump(mode="json", exclude_unset=True)
    return Call("PUT", "/budgets", model(BudgetOut, "PUT /budgets"), json=data)


def delete_budget(budget_id: int) -> Call[None]:
    return Call("DELETE", f"/budgets/{int(budget_id)}", lambda _: None)


def reservations(past: bool) -> Call[list[ReservationOut]]:
    params = {"past": "true"} if past else {}
    return Call(
        "GET", "/reservations", model(list[ReservationOut], "GET /reservations"), params=params
    )


def add_reservation(body: ReservationIn) -> Call[ReservationOut]:
    data = body.model_dump(mode="json", exclude_unset=True)
    return Call("POST", "/reservations", model(ReservationOut, "POST /reservations"), json=data)


def delete_reservation(reservation_id: str) -> Call[None]:
    return Call("DELETE", f"/reservations/{seg(reservation_id)}", lambda _: None)


def chargeback(
    by: Literal["tenant", "user", "model"],
    from_: date | str | None,
    to: date | str | None,
    tenant: str | None,
) -> Call[ChargebackOut]:
    if by not in ("tenant", "user", "model"):
        raise InvalidInput(f"by={by!r}: give 'tenant', 'user' or 'model'", "by")
    params = {"by": by} | _days(from_, to)
    if tenant:
        params["tenant"] = tenant
    return Call(
        "GET",
        "/usage/chargeback",
        model(ChargebackOut, "GET /usage/chargeback"),
        params=params,
    )
