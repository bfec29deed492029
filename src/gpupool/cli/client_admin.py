"""Admin CLI commands (API clients too): tenants, users, GPUs, profiles."""

from __future__ import annotations

import sys
from typing import Any

import typer

from gpupool.cli import flags, tables
from gpupool.cli.base import CliError, api, handled, out, parse_duration, parse_mib, print_json
from gpupool.cli.cluster_view import outside_text
from gpupool.cli.tables import Col, Output, asks_text

tenant_app = typer.Typer(help="Tenants and their quotas.", no_args_is_help=True)
user_app = typer.Typer(help="Users and their tenant roles.", no_args_is_help=True)
gpu_app = typer.Typer(help="GPUs: list them, set sharing modes.", no_args_is_help=True)
profile_app = typer.Typer(help="Profiles: named workload shapes.", no_args_is_help=True)
node_app = typer.Typer(
    help="Nodes: hosts with GPUs, and their agents' credentials.", no_args_is_help=True
)


def _quota(
    guaranteed: float | None, limit: float | None, weight: float | None, max_per_user: float | None
) -> dict[str, Any]:
    q: dict[str, Any] = {}
    for k, v in (
        ("guaranteed", guaranteed),
        ("limit", limit),
        ("weight", weight),
        ("max_per_user", max_per_user),
    ):
        if v is not None:
            q[k] = v
    return q


@tenant_app.command("create")
def tenant_create(
    name: str = typer.Argument(..., help="path, e.g. physics/lab-a"),
    guaranteed: float = typer.Option(None, "--guaranteed", "-g", help="GPUs guaranteed"),
    limit: float = typer.Option(None, "--limit", "-l", help="GPUs at most (borrowing incl.)"),
    weight: float = typer.Option(None, "--weight", help="share of idle GPUs vs siblings"),
    max_per_user: float = typer.Option(None, "--max-per-user", help="GPUs per user at most"),
    idle_timeout: float = typer.Option(None, "--idle-timeout", help="cull idle GPU holders (s)"),
) -> None:
    """Create a tenant (admins; tenant-admins below their tenant)."""

    @handled
    def go() -> None:
        body: dict[str, Any] = {
            "name": name,
            "quota": _quota(guaranteed, limit, weight, max_per_user),
        }
        if idle_timeout is not None:
            body["idle_timeout_s"] = idle_timeout
        try:
            t = api().post("/tenants", body)
        except CliError as e:
            raise flags.flag_terms(e, flags.TENANT_FLAGS) from None
        out.print(f"created {t['name']}")

    go()


@tenant_app.command("set-quota")
def tenant_set_quota(
    name: str = typer.Argument(..., help="tenant path, e.g. physics/lab-a"),
    guaranteed: float = typer.Option(None, "--guaranteed", "-g", help="GPUs guaranteed"),
    limit: float = typer.Option(None, "--limit", "-l", help="GPUs at most (borrowing incl.)"),
    weight: float = typer.Option(None, "--weight", help="share of idle GPUs vs siblings"),
    max_per_user: float = typer.Option(None, "--max-per-user", help="GPUs per user at most"),
    no_limit: bool = typer.Option(False, "--no-limit", help="remove the limit"),
    idle_timeout: float = typer.Option(
        None, "--idle-timeout", min=1, help="cull work whose GPUs sit idle this long (s)"
    ),
    no_idle_timeout: bool = typer.Option(
        False, "--no-idle-timeout", help="never cull this tenant's idle work"
    ),
) -> None:
    """Change a tenant's quota and idle policy; options not given keep their value."""

    @handled
    def go() -> None:
        if idle_timeout is not None and no_idle_timeout:
            raise CliError("use --idle-timeout or --no-idle-timeout, not both", 2)
        if limit is not None and no_limit:
            raise CliError("use --limit or --no-limit, not both", 2)
        c = api()
        body: dict[str, Any] = {}
        q = _quota(guaranteed, limit, weight, max_per_user)
        if q or no_limit:
            body["quota"] = c.get(f"/tenants/{name}")["quota"] | q
            if no_limit:
                body["quota"]["limit"] = None
        if idle_timeout is not None:
            body["idle_timeout_s"] = idle_timeout
        if no_idle_timeout:
            body["clear_idle_timeout"] = True
        if not body:
            raise CliError(
                "nothing to change: give --guaranteed, --limit, --weight, "
                "--max-per-user, --no-limit, --idle-timeout or --no-idle-timeout",
                2,
            )
        try:
            t = c.call("PATCH", f"/tenants/{name}", json=body)
        except CliError as e:
            raise flags.flag_terms(e, flags.TENANT_FLAGS) from None
        out.print(f"{t['name']}: {_policy(t)}")

    go()


def _policy(t: dict[str, Any]) -> str:
    """Every value of the tenant's quota and idle policy, as the server now stores them."""
    q = t["quota"]
    lim = "none" if q["limit"] is None else f"{q['limit']:g}"
    per_user = "none" if q.get("max_per_user") is None else f"{q['max_per_user']:g}"
    idle = "never" if t["idle_timeout_s"] is None else tables.duration(t["idle_timeout_s"])
    by_model = q.get("guaranteed_by_model") or {}
    models = "".join(f", guaranteed {v:g} {m}" for m, v in sorted(by_model.items()))
    return (
        f"guaranteed {q['guaranteed']:g}{models}, limit {lim}, weight {q['weight']:g}, "
        f"max per user {per_user}, idle timeout {idle}"
    )


def _opt_gpus(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"


TENANT_COLUMNS = (
    Col("TENANT", lambda t: t["name"]),
    Col("GUARANTEED", lambda t: f"{t['quota']['guaranteed']:g}", right=True),
    Col("LIMIT", lambda t: _opt_gpus(t["quota"]["limit"]), right=True),
    Col("WEIGHT", lambda t: f"{t['quota']['weight']:g}", wide=True, right=True),
    Col("PER USER", lambda t: _opt_gpus(t["quota"]["max_per_user"]), wide=True, right=True),
    Col("IN USE", lambda t: f"{t['allocated_gpus']:g}", right=True),
    Col("RUNNING", lambda t: t["running"], right=True),
    Col("PENDING", lambda t: t["pending"], right=True),
    Col("IDLE TIMEOUT", lambda t: tables.duration(t["idle_timeout_s"]), wide=True),
)


@tenant_app.command("ls")
def tenant_ls(
    as_json: bool = tables.json_option(), output: Output = tables.output_option()
) -> None:
    """The tenant tree with quotas (GPUs) and what each subtree holds now."""

    @handled
    def go() -> None:
        ts = api().get("/tenants")
        if tables.wants_json(output, as_json):
            return print_json(ts)
        tables.show(out, TENANT_COLUMNS, ts, output, empty="no tenants you may see")

    go()


ROLES = ("tenant-admin", "member", "viewer")


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise CliError(f"--role {role!r}: use tenant-admin, member or viewer", 2)


@user_app.command("create")
def user_create(
    name: str = typer.Argument(...),
    tenant: str = typer.Option(None, "--tenant", "-t", help="also give a role in this tenant"),
    role: str = typer.Option("member", "--role", "-r", help="with --tenant: " + ", ".join(ROLES)),
    admin: bool = typer.Option(False, "--admin", help="make a global admin"),
    unix_user: str = typer.Option(None, "--unix-user", help="Unix account jobs run as"),
    password_stdin: bool = typer.Option(False, "--password-stdin", help="read the password"),
) -> None:
    """Create a user (admins), optionally in a tenant. Prompts for the password unless
    --password-stdin."""

    @handled
    def go() -> None:
        _check_role(role)
        pw = sys.stdin.readline().rstrip("\n") if password_stdin else None
        if pw is None:
            pw = typer.prompt("password for " + name, hide_input=True, confirmation_prompt=True)
        body: dict[str, Any] = {"name": name, "password": pw, "admin": admin}
        if unix_user:
            body["unix_user"] = unix_user
        c = api()
        if tenant:  # refuse before creating anything if the tenant is not there
            c.get(f"/tenants/{tenant}")
        c.post("/users", body)
        out.print(f"created user {name}" + (" (admin)" if admin else ""))
        if tenant:
            try:
                c.call("PUT", f"/users/{name}/memberships/{tenant}", json={"role": role})
            except CliError as e:
                raise CliError(
                    f"{name} was created but not added to {tenant}: {e}; "
                    f"run gpupool user add-to-tenant {name} {tenant} --role {role}"
                ) from None
            out.print(f"{name} is now {role} of {tenant}")

    go()


@user_app.command("add-to-tenant")
def user_add_to_tenant(
    name: str = typer.Argument(...),
    tenant: str = typer.Argument(...),
    role: str = typer.Option("member", "--role", "-r", help="tenant-admin, member or viewer"),
) -> None:
    """Give a user a role in a tenant (admins, tenant-admins of the tenant)."""

    @handled
    def go() -> None:
        _check_role(role)
        api().call("PUT", f"/users/{name}/memberships/{tenant}", json={"role": role})
        out.print(f"{name} is now {role} of {tenant}")

    go()


USER_COLUMNS = (
    Col("USER", lambda u: u["name"]),
    Col("ADMIN", lambda u: "yes" if u["admin"] else ""),
    Col("UNIX USER", lambda u: u["unix_user"], wide=True),
    Col(
        "ROLES",
        lambda u: ", ".join(f"{m['role']}:{m['tenant']}" for m in u["memberships"]),
        wrap=True,
    ),
)


@user_app.command("ls")
def user_ls(as_json: bool = tables.json_option(), output: Output = tables.output_option()) -> None:
    """Users and their roles."""

    @handled
    def go() -> None:
        us = api().get("/users")
        if tables.wants_json(output, as_json):
            return print_json(us)
        tables.show(out, USER_COLUMNS, us, output, empty="no users you may see")

    go()


def _holders(g: dict[str, Any]) -> str:
    held = [f"{h['user']}/{h['workload_id']}" for h in g["holders"]]
    if g.get("outside"):
        held.append(f"outside gpupool: {outside_text(g['outside'])}")
    return ", ".join(held)


def _sharing(g: dict[str, Any]) -> str:
    """'mig 3/7 free' for a GPU cut by a MIG layout, else the mode."""
    insts = g.get("mig_instances") or []
    if not insts:
        return str(g["sharing"])
    free = sum(1 for i in insts if i["workload_id"] is None)
    return f"mig {free}/{len(insts)} free"


GPU_COLUMNS = (
    Col("GPU", lambda g: f"{g['node']}:{g['index']}"),
    Col("MODEL", lambda g: g["model"]),
    Col("MiB", lambda g: g["memory_mib"], wide=True, right=True),
    Col("SHARING", lambda g: _sharing(g)),
    Col("HEALTH", lambda g: g["health"], wide=True),
    Col("ALLOC", lambda g: f"{g['allocated_milli'] / 1000:g}", right=True),
    Col("HOLDERS", _holders, wrap=True),
    Col("MIG LAYOUT", lambda g: g.get("mig_layout") or "", wide=True, wrap=True),
    Col("UUID", lambda g: g["uuid"], wide=True),
)


@gpu_app.command("ls")
def gpu_ls(as_json: bool = tables.json_option(), output: Output = tables.output_option()) -> None:
    """Every GPU, its sharing mode and who holds it (-o wide: memory, health, UUID)."""

    @handled
    def go() -> None:
        gs = api().get("/gpus")
        if tables.wants_json(output, as_json):
            return print_json(gs)
        tables.show(out, GPU_COLUMNS, gs, output, empty="no GPUs registered")

    go()


def _free_gpus(n: dict[str, Any]) -> str:
    free = sum(
        1
        for g in n["gpus"]
        if not g["holders"] and g["health"] == "healthy" and not g.get("outside")
    )
    return f"{free}/{len(n['gpus'])}"


def _outside(n: dict[str, Any]) -> str:
    """The node's GPUs used outside gpupool, by holder: 'slurm job 4711 (bob) x3'."""
    counts: dict[str, int] = {}
    for g in n["gpus"]:
        if g.get("outside"):
            t = outside_text(g["outside"])
            counts[t] = counts.get(t, 0) + 1
    return ", ".join(t + (f" x{k}" if k > 1 else "") for t, k in counts.items()) or "-"


def _models(n: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for g in n["gpus"]:
        counts[g["model"]] = counts.get(g["model"], 0) + 1
    return ", ".join(f"{k}x{m}" for m, k in counts.items())


NODE_COLUMNS = (
    Col("NODE", lambda n: n["name"]),
    Col("STATE", lambda n: n["state"]),
    Col("FREE GPUS", _free_gpus, right=True),
    Col("MODELS", _models, wrap=True),
    Col("OUTSIDE", _outside, wrap=True),
    Col("CPUS", lambda n: f"{n['cpu_milli'] / 1000:g}", wide=True, right=True),
    Col("MEMORY MiB", lambda n: n["memory_mib"], wide=True, right=True),
    Col("HEARTBEAT", lambda n: tables.age(n["last_heartbeat"]), wide=True),
    Col(
        "LABELS",
        lambda n: ", ".join(f"{k}={v}" for k, v in n["labels"].items()),
        wide=True,
        wrap=True,
    ),
)


@node_app.command("ls")
def node_ls(as_json: bool = tables.json_option(), output: Output = tables.output_option()) -> None:
    """Nodes, their state, free GPUs (healthy, held by nobody) and the GPUs used outside
    gpupool (by a plain Slurm job, someone else's pod), naming who holds them."""

    @handled
    def go() -> None:
        ns = api().get("/nodes")
        if tables.wants_json(output, as_json):
            return print_json(ns)
        tables.show(out, NODE_COLUMNS, ns, output, empty="no nodes registered")

    go()


def _gpu_uuid(c: Any, gpu: str) -> str:
    """A GPU's UUID from NODE:INDEX (as `gpu ls` shows it); anything else is taken as a UUID."""
    node, sep, index = gpu.rpartition(":")
    if not sep or not index.isdigit():
        return gpu
    for g in c.get("/gpus"):
        if g["node"] == node and g["index"] == int(index):
            return str(g["uuid"])
    raise CliError(f"no GPU {index} on node {node!r}; see gpupool gpu ls")


@gpu_app.command("set-sharing")
def gpu_set_sharing(
    gpu: str = typer.Argument(..., help="NODE:INDEX as gpupool gpu ls shows it, or the GPU UUID"),
    mode: str = typer.Argument(..., help="exclusive, shared or mig"),
) -> None:
    """Set how a GPU may be shared (admins). Running work keeps its shares."""

    @handled
    def go() -> None:
        if mode not in ("exclusive", "shared", "mig"):
            raise CliError(f"mode {mode!r}: use exclusive, shared or mig", 2)
        c = api()
        g = c.call("PATCH", f"/gpus/{_gpu_uuid(c, gpu)}", json={"sharing": mode})
        out.print(f"GPU {g['index']} on {g['node']} is now {g['sharing']}")

    go()


@gpu_app.command("mig-layout")
def gpu_mig_layout(
    gpu: str = typer.Argument(..., help="NODE:INDEX as gpupool gpu ls shows it, or the GPU UUID"),
    layout: str = typer.Argument(
        ...,
        help="all-PROFILE (all-1g.10gb, all-3g.40gb), all-balanced, PROFILE:COUNT,… "
        "(3g.40gb:1,1g.10gb:4) or PROFILE@START,… ; 'none' clears it",
    ),
) -> None:
    """Cut a GPU into MIG instances (admins): sets its sharing to mig and its layout. Only
    on a GPU no work holds; on this host the instances must exist (nvidia-smi mig)."""

    @handled
    def go() -> None:
        c = api()
        clear = layout.strip().lower() == "none"
        body = {"mig_layout": ""} if clear else {"sharing": "mig", "mig_layout": layout}
        g = c.call("PATCH", f"/gpus/{_gpu_uuid(c, gpu)}", json=body)
        if clear:
            out.print(f"GPU {g['index']} on {g['node']} has no MIG layout: handed out whole")
            return
        insts = ", ".join(f"{i['profile']}@{i['start']}" for i in g["mig_instances"])
        out.print(f"GPU {g['index']} on {g['node']} is cut into {insts}")

    go()


@profile_app.command("create")
def profile_create(
    name: str = typer.Argument(...),
    gpus: int = typer.Option(0, "--gpus", min=0),
    gpu_fraction: float = typer.Option(None, "--gpu-fraction"),
    gpu_memory: str = typer.Option(None, "--gpu-memory", help="e.g. 20G"),
    gpu_model: str = typer.Option(None, "--gpu-model"),
    mig: str = typer.Option(None, "--mig", help="a MIG instance of this profile, e.g. 1g.10gb"),
    description: str = typer.Option("", "--description", "-d"),
    kind: str = typer.Option("notebook", "--kind", help="notebook or job"),
    image: str = typer.Option(None, "--image", help="container image (Kubernetes)"),
    tenant: list[str] = typer.Option(None, "--tenant", "-t", help="offered to (repeat); all"),
    default_runtime: str = typer.Option(
        None, "--default-runtime", help="runtime of its work that gives none, e.g. 8h"
    ),
    max_runtime: str = typer.Option(None, "--max-runtime", help="longest allowed, e.g. 48h"),
) -> None:
    """Define a profile (admins)."""

    @handled
    def go() -> None:
        body: dict[str, Any] = {
            "name": name,
            "gpus": gpus,
            "description": description,
            "kind": kind,
            "tenants": tenant or [],
        }
        if gpu_fraction is not None:
            body["gpu_fraction"] = gpu_fraction
        if gpu_memory:
            body["gpu_memory_mib"] = parse_mib(gpu_memory)
        if gpu_model:
            body["gpu_model"] = gpu_model
        if mig:
            body["mig"] = mig
        if image:
            body["image"] = image
        if default_runtime is not None:
            body["default_runtime_s"] = parse_duration(default_runtime, "--default-runtime")
        if max_runtime is not None:
            body["max_runtime_s"] = parse_duration(max_runtime, "--max-runtime")
        p = api().post("/profiles", body)
        out.print(f"created profile {p['name']}: {p['request']['description']}")

    go()


PROFILE_COLUMNS = (
    Col("PROFILE", lambda p: p["name"]),
    Col("KIND", lambda p: p["kind"]),
    Col("ASKS", lambda p: asks_text(p["request"])),
    Col("TENANTS", lambda p: ", ".join(p["tenants"]) or "all", wrap=True),
    Col("DESCRIPTION", lambda p: p["description"], wide=True, wrap=True),
)


@profile_app.command("ls")
def profile_ls(
    as_json: bool = tables.json_option(), output: Output = tables.output_option()
) -> None:
    """Profiles offered to you (admins: all)."""

    @handled
    def go() -> None:
        ps = api().get("/profiles")
        if tables.wants_json(output, as_json):
            return print_json(ps)
        tables.show(out, PROFILE_COLUMNS, ps, output, empty="no profiles")

    go()


@profile_app.command("rm")
def profile_rm(name: str = typer.Argument(...)) -> None:
    """Delete a profile (admins)."""

    @handled
    def go() -> None:
        api().call("DELETE", f"/profiles/{name}")
        out.print(f"deleted profile {name}")

    go()


def register(app: typer.Typer) -> None:
    app.add_typer(tenant_app, name="tenant")
    app.add_typer(user_app, name="user")
    app.add_typer(gpu_app, name="gpu")
    app.add_typer(node_app, name="node")
    app.add_typer(profile_app, name="profile")
