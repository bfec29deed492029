"""Admin CLI commands (API clients too): tenants, users, GPUs, profiles."""

from __future__ import annotations

import sys
from typing import Any

import typer

from gpupool.cli.client import CliError, _print_json, _table, api, handled, out, parse_mib

tenant_app = typer.Typer(help="Tenants and their quotas.", no_args_is_help=True)
user_app = typer.Typer(help="Users and their tenant roles.", no_args_is_help=True)
gpu_app = typer.Typer(help="GPUs: list them, set sharing modes.", no_args_is_help=True)
profile_app = typer.Typer(help="Profiles: named workload shapes.", no_args_is_help=True)


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
        t = api().post("/tenants", body)
        out.print(f"created {t['name']}")

    go()


@tenant_app.command("set-quota")
def tenant_set_quota(
    name: str = typer.Argument(...),
    guaranteed: float = typer.Option(None, "--guaranteed", "-g"),
    limit: float = typer.Option(None, "--limit", "-l"),
    weight: float = typer.Option(None, "--weight"),
    max_per_user: float = typer.Option(None, "--max-per-user"),
    no_limit: bool = typer.Option(False, "--no-limit", help="remove the limit"),
) -> None:
    """Change a tenant's quota; options not given keep their value."""

    @handled
    def go() -> None:
        c = api()
        cur = c.get(f"/tenants/{name}")["quota"]
        q = cur | _quota(guaranteed, limit, weight, max_per_user)
        if no_limit:
            q["limit"] = None
        t = c.call("PATCH", f"/tenants/{name}", json={"quota": q})
        lim = "none" if t["quota"]["limit"] is None else f"{t['quota']['limit']:g}"
        out.print(
            f"{t['name']}: guaranteed {t['quota']['guaranteed']:g}, limit {lim}, "
            f"weight {t['quota']['weight']:g}"
        )

    go()


@tenant_app.command("ls")
def tenant_ls(as_json: bool = typer.Option(False, "--json")) -> None:
    """The tenant tree with quotas and what each subtree holds now."""

    @handled
    def go() -> None:
        ts = api().get("/tenants")
        if as_json:
            return _print_json(ts)
        rows = [
            [
                t["name"],
                f"{t['quota']['guaranteed']:g}",
                "-" if t["quota"]["limit"] is None else f"{t['quota']['limit']:g}",
                f"{t['quota']['weight']:g}",
                f"{t['allocated_gpus']:g}",
                t["running"],
                t["pending"],
            ]
            for t in ts
        ]
        cols = ["TENANT", "GUARANTEED", "LIMIT", "WEIGHT", "GPUS IN USE", "RUNNING", "PENDING"]
        out.print(_table(cols, rows))

    go()


@user_app.command("create")
def user_create(
    name: str = typer.Argument(...),
    admin: bool = typer.Option(False, "--admin", help="make a global admin"),
    unix_user: str = typer.Option(None, "--unix-user", help="Unix account jobs run as"),
    password_stdin: bool = typer.Option(False, "--password-stdin", help="read the password"),
) -> None:
    """Create a user (admins). Prompts for the password unless --password-stdin."""

    @handled
    def go() -> None:
        pw = sys.stdin.readline().rstrip("\n") if password_stdin else None
        if pw is None:
            pw = typer.prompt("password for " + name, hide_input=True, confirmation_prompt=True)
        body: dict[str, Any] = {"name": name, "password": pw, "admin": admin}
        if unix_user:
            body["unix_user"] = unix_user
        api().post("/users", body)
        out.print(f"created user {name}" + (" (admin)" if admin else ""))

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
        if role not in ("tenant-admin", "member", "viewer"):
            raise CliError(f"--role {role!r}: use tenant-admin, member or viewer", 2)
        api().call("PUT", f"/users/{name}/memberships/{tenant}", json={"role": role})
        out.print(f"{name} is now {role} of {tenant}")

    go()


@user_app.command("ls")
def user_ls(as_json: bool = typer.Option(False, "--json")) -> None:
    """Users and their roles."""

    @handled
    def go() -> None:
        us = api().get("/users")
        if as_json:
            return _print_json(us)
        rows = [
            [
                u["name"],
                "yes" if u["admin"] else "",
                ", ".join(f"{m['role']}:{m['tenant']}" for m in u["memberships"]),
            ]
            for u in us
        ]
        out.print(_table(["USER", "ADMIN", "ROLES"], rows))

    go()


@gpu_app.command("ls")
def gpu_ls(as_json: bool = typer.Option(False, "--json")) -> None:
    """Every GPU, its sharing mode and who holds it."""

    @handled
    def go() -> None:
        gs = api().get("/gpus")
        if as_json:
            return _print_json(gs)
        rows = [
            [
                g["node"],
                g["index"],
                g["model"],
                g["memory_mib"],
                g["sharing"],
                g["health"],
                f"{g['allocated_milli'] / 1000:g}",
                ", ".join(f"{h['user']}/{h['workload_id']}" for h in g["holders"]),
                g["uuid"],
            ]
            for g in gs
        ]
        cols = ["NODE", "GPU", "MODEL", "MiB", "SHARING", "HEALTH", "ALLOCATED", "HOLDERS", "UUID"]
        out.print(_table(cols, rows))

    go()


@gpu_app.command("set-sharing")
def gpu_set_sharing(
    uuid: str = typer.Argument(..., help="GPU UUID (see gpupool gpu ls)"),
    mode: str = typer.Argument(..., help="exclusive, shared or mig"),
) -> None:
    """Set how a GPU may be shared (admins). Running work keeps its shares."""

    @handled
    def go() -> None:
        if mode not in ("exclusive", "shared", "mig"):
            raise CliError(f"mode {mode!r}: use exclusive, shared or mig", 2)
        g = api().call("PATCH", f"/gpus/{uuid}", json={"sharing": mode})
        out.print(f"GPU {g['index']} on {g['node']} is now {g['sharing']}")

    go()


@profile_app.command("create")
def profile_create(
    name: str = typer.Argument(...),
    gpus: int = typer.Option(0, "--gpus", min=0),
    gpu_fraction: float = typer.Option(None, "--gpu-fraction"),
    gpu_memory: str = typer.Option(None, "--gpu-memory", help="e.g. 20G"),
    gpu_model: str = typer.Option(None, "--gpu-model"),
    description: str = typer.Option("", "--description", "-d"),
    kind: str = typer.Option("notebook", "--kind", help="notebook or job"),
    image: str = typer.Option(None, "--image", help="container image (Kubernetes)"),
    tenant: list[str] = typer.Option(None, "--tenant", "-t", help="offered to (repeat); all"),
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
        if image:
            body["image"] = image
        p = api().post("/profiles", body)
        out.print(f"created profile {p['name']}: {p['request']['description']}")

    go()


@profile_app.command("ls")
def profile_ls(as_json: bool = typer.Option(False, "--json")) -> None:
    """Profiles offered to you (admins: all)."""

    @handled
    def go() -> None:
        ps = api().get("/profiles")
        if as_json:
            return _print_json(ps)
        rows = [
            [
                p["name"],
                p["kind"],
                p["request"]["description"],
                ", ".join(p["tenants"]) or "all",
                p["description"],
            ]
            for p in ps
        ]
        out.print(_table(["PROFILE", "KIND", "ASKS", "TENANTS", "DESCRIPTION"], rows))

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
    app.add_typer(profile_app, name="profile")
