"""The spawn form and the validation of `user_options` (pure functions, no I/O).

`user_options` are accepted only as ``{"profile": NAME, "tenant": TENANT}`` (tenant optional
when the user belongs to one tenant). Anything else — raw resources, unknown profiles,
profiles the user's tenants may not use — is refused with `OptionsError`, whose message is
shown to the user. The server checks again on submit (quota, limits): the REST API can
bypass the form, so nothing here is trusted by gpupool.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

ALLOWED_KEYS = frozenset({"profile", "tenant"})
#: Roles that may submit workloads in a tenant.
SUBMIT_ROLES = frozenset({"member", "tenant-admin"})


class OptionsError(ValueError):
    """user_options were refused; the message says what to choose instead."""


@dataclass(frozen=True, slots=True)
class Choice:
    profile: dict
    tenant: str


def _in(tenant: str, root: str) -> bool:
    return tenant == root or tenant.startswith(root + "/")


def submit_tenants(user: Mapping, tenants: Iterable[Mapping]) -> list[str]:
    """Leaf tenants where `user` (the API's UserOut) may submit work, sorted."""
    leaves = sorted(t["name"] for t in tenants if t.get("leaf", True))
    if user.get("admin"):
        return leaves
    roots = [m["tenant"] for m in user.get("memberships", []) if m.get("role") in SUBMIT_ROLES]
    return [t for t in leaves if any(_in(t, r) for r in roots)]


def profile_allows(profile: Mapping, tenant: str) -> bool:
    allowed = profile.get("tenants") or []
    return not allowed or any(_in(tenant, t) for t in allowed)


def usable_profiles(profiles: Iterable[Mapping], tenants: list[str]) -> list[dict]:
    """Notebook profiles at least one of `tenants` may use, in name order."""
    return sorted(
        (
            dict(p)
            for p in profiles
            if p.get("kind", "notebook") == "notebook"
            and any(profile_allows(p, t) for t in tenants)
        ),
        key=lambda p: p["name"],
    )


def _first(value: object) -> object:
    """Form data arrives as lists of strings; the REST API sends plain values."""
    if isinstance(value, list | tuple):
        return value[0] if len(value) == 1 else value
    return value


def validate(user_options: object, profiles: list[dict], tenants: list[str]) -> Choice:
    """Check `user_options` against what this user may use; return the choice or raise."""
    if not tenants:
        raise OptionsError(
            "you are not a member of any gpupool tenant that may run notebooks; "
            "ask your gpupool admin to add you to a tenant"
        )
    if user_options is None:
        user_options = {}
    if not isinstance(user_options, Mapping):
        raise OptionsError('options must be an object like {"profile": "NAME"}')
    unknown = sorted(set(user_options) - ALLOWED_KEYS)
    if unknown:
        raise OptionsError(
            f"unknown option{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; "
            "resources come from profiles: send only 'profile' (and 'tenant') — "
            f"profiles you may use: {', '.join(p['name'] for p in profiles) or 'none'}"
        )
    tenant = _first(user_options.get("tenant")) or None
    if tenant is not None and (not isinstance(tenant, str) or tenant not in tenants):
        raise OptionsError(
            f"you cannot start notebooks in tenant {tenant!r}; your tenants: {', '.join(tenants)}"
        )
    name = _first(user_options.get("profile")) or None
    if name is None:
        if len(profiles) == 1:
            name = profiles[0]["name"]
        else:
            raise OptionsError(
                "choose a profile; profiles you may use: "
                + (", ".join(p["name"] for p in profiles) or "none")
            )
    by_name = {p["name"]: p for p in profiles}
    if not isinstance(name, str) or name not in by_name:
        raise OptionsError(
            f"no profile {name!r} is available to you; choose one of: "
            + (", ".join(by_name) or "none (ask your gpupool admin to create one)")
        )
    profile = by_name[name]
    candidates = [t for t in ([tenant] if tenant else tenants) if profile_allows(profile, t)]
    if not candidates:
        raise OptionsError(
            f"profile {name!r} is not open to tenant {tenant or tenants[0]!r}; "
            f"it is for: {', '.join(profile.get('tenants') or [])}"
        )
    return Choice(profile=profile, tenant=candidates[0])


# -- availability -------------------------------------------------------------------------


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _gpus(x: float) -> str:
    return f"{x:g}"


def gpu_availability(profile: Mapping, gpus: Iterable[Mapping]) -> str:
    """'2 of 8 H100 free' (whole-GPU profiles) or '3 GPUs with room for 1/4' (fractions)."""
    req = profile.get("request", {})
    model = req.get("gpu_model")
    pool = [g for g in gpus if g.get("health", "healthy") == "healthy"]
    if model:
        pool = [g for g in pool if g.get("model") == model]
    models = {g.get("model") for g in pool}
    label = model or (next(iter(models)) if len(models) == 1 else "GPUs")
    if req.get("mig"):
        free = sum(
            1
            for g in pool
            for i in g.get("mig_instances") or ()
            if i.get("profile") == req["mig"] and not i.get("workload_id")
        )
        return f"{free} free {req['mig']} MIG instance" + ("" if free == 1 else "s")
    if not req.get("gpus") and not req.get("gpu_fraction"):
        return "CPU only"
    if req.get("gpus"):
        free = sum(1 for g in pool if not g.get("allocated_milli"))
        return f"{free} of {len(pool)} {label} free"
    milli = round(float(req["gpu_fraction"]) * 1000)
    mem = int(req.get("gpu_memory_mib") or 0)
    room = sum(
        1
        for g in pool
        if g.get("sharing") == "shared"
        and 1000 - int(g.get("allocated_milli", 0)) >= milli
        and int(g["memory_mib"]) - int(g.get("allocated_memory_mib", 0)) >= mem
    )
    return f"{room} of {len(pool)} {label} have room for this share"


def tenant_usage(tenant: Mapping) -> str:
    """'lab-a uses 3 of its 4 guaranteed GPUs (limit 6)'."""
    q = tenant.get("quota", {})
    used = float(tenant.get("allocated_gpus", 0))
    text = f"{tenant['name']} uses {_gpus(used)} of its {_gpus(float(q.get('guaranteed', 0)))}"
    text += " guaranteed GPUs"
    if q.get("limit") is not None:
        text += f" (limit {_gpus(float(q['limit']))})"
    return text


def describe_request(profile: Mapping) -> str:
    req = profile.get("request", {})
    return str(req.get("description") or "")


def render_form(
    profiles: list[dict],
    tenants: list[str],
    gpus: list[dict],
    tenant_info: Mapping[str, Mapping],
    notice: str | None = None,
) -> str:
    """HTML of the spawn form: one radio per profile with live availability."""
    parts: list[str] = []
    if notice:
        parts.append(f'<div class="alert alert-warning" id="gpupool-notice">{escape(notice)}</div>')
    if not profiles:
        parts.append(
            '<p class="text-danger" id="gpupool-no-profiles">No gpupool profile is open to your '
            "tenants; ask your gpupool admin to create one.</p>"
        )
        return "\n".join(parts)
    for t in tenants:
        if t in tenant_info:
            usage = escape(tenant_usage(tenant_info[t]))
            parts.append(f'<p class="text-muted gpupool-tenant">{usage}</p>')
    if len(tenants) > 1:
        opts = "".join(f'<option value="{escape(t)}">{escape(t)}</option>' for t in tenants)
        parts.append(
            '<div class="mb-3"><label for="gpupool-tenant" class="form-label">Tenant</label>'
            f'<select class="form-select" name="tenant" id="gpupool-tenant">{opts}</select></div>'
        )
    parts.append('<fieldset class="mb-3"><legend>Profile</legend>')
    for i, p in enumerate(profiles):
        pid = f"gpupool-profile-{escape(p['name'])}"
        checked = " checked" if i == 0 else ""
        what = escape(describe_request(p))
        avail = escape(gpu_availability(p, gpus))
        desc = escape(p.get("description") or "")
        parts.append(
            '<div class="form-check mb-2">'
            f'<input class="form-check-input" type="radio" name="profile" id="{pid}" '
            f'value="{escape(p["name"])}"{checked}>'
            f'<label class="form-check-label" for="{pid}"><strong>{escape(p["name"])}</strong>'
            f' — {what} <span class="badge bg-secondary gpupool-availability">{avail}</span>'
            + (f'<br><small class="text-muted">{desc}</small>' if desc else "")
            + "</label></div>"
        )
    parts.append("</fieldset>")
    parts.append(
        '<p class="text-muted small">If no GPU is free, your notebook waits in the gpupool queue '
        "and starts by itself when one is; you can cancel while it waits.</p>"
    )
    return "\n".join(parts)


def asks_gpu(workload: Mapping) -> bool:
    """True if the workload (as the API gives it) asks for a GPU or a fraction of one."""
    r = workload.get("request") or {}
    return bool(r.get("gpus") or r.get("gpu_fraction") or r.get("mig"))


def _minutes(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.0f} h"
    return f"{max(1, round(seconds / 60))} min"


def expected_text(forecast: Mapping | None, now: float) -> str:
    """'expected to start in about 12 min, by 12:40 UTC at the latest' (the forecast of the
    API's `pending.forecast`, relative to `now`), or '' when there is none."""
    if not forecast:
        return ""

    def at(key: str) -> float | None:
        iso = forecast.get(key)
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() if iso else None

    exp, late = at("expected"), at("latest")
    if exp is None:
        return str(forecast.get("text") or "")
    text = (
        "expected to start soon"
        if exp - now < 60
        else (f"expected to start in about {_minutes(exp - now)}")
    )
    if late is not None and late - exp >= 60 and late > now:
        text += f", by {datetime.fromtimestamp(late, UTC):%H:%M} UTC at the latest"
    return text


def pending_message(workload: Mapping, now: float | None = None) -> str:
    """What a queued notebook waits for, and the scheduler's reason: 'Queued for a GPU: 3rd
    in line for lab-a (lab-a is at its limit of 2 GPUs)'; a notebook that asks for no GPU
    waits for CPUs and memory ('Queued for CPUs and memory: 1st in line for lab-a (...)').
    With a forecast, when it is expected to start: '...; expected to start in about 12 min,
    by 12:40 UTC at the latest' (`now`: the hub's clock, default time.time())."""
    info = workload.get("pending") or {}
    tenant = workload.get("tenant", "")
    what = "a GPU" if asks_gpu(workload) else "CPUs and memory"
    if not info:
        return f"Queued for {what} in {tenant}"
    # PendingInfo: `position` is 1-based within the tenant's queue (tenant_position ranks
    # the tenant among tenants).
    pos = int(info.get("position") or 0)
    line = f"{_ordinal(pos)} in line for {tenant}" if pos else f"in line for {tenant}"
    reason = info.get("reason")
    text = f"Queued for {what}: {line}" + (f" ({reason})" if reason else "")
    expected = expected_text(info.get("forecast"), time.time() if now is None else now)
    return text + (f"; {expected}" if expected else "")
