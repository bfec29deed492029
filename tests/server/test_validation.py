"""Input that can never work is a 422 problem naming the field, on SQLite and PostgreSQL,
and changes nothing (issue 13, items 1, 8 and 9): commands no OS can execute, NUL bytes in any
string of any request (body, path, query), non-finite numbers, tenant and user names that
could become paths or options, unix_user on PATCH as on create."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gpupool.clock import ManualClock
from gpupool.domain.commands import LINUX_MAX_ARG_STRLEN
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.services.accounts import issue_token
from gpupool.server.services.workloads import os_arg_limits
from gpupool.server.settings import Settings
from gpupool.system import SystemSettings, build_system
from tests.server.conftest import API, seed
from tests.server.test_bad_input import _problem, _state
from tests.store.databases import DB_PARAMS, make_store

NUL = "\u0000"


def test_the_probe_a_nul_byte_in_an_argument_is_422(world):
    """The exact request that blocked the pool: accepted with 201 before."""
    before = _state(world)
    r = world.post("outsider", "/workloads", json={"gpus": 4, "command": ["echo", "a\u0000b"]})
    p = _problem(r, 422)
    assert p["errors"][0]["field"] == "body.command"
    assert "command[1] contains a NUL byte" in p["detail"]
    assert _state(world) == before


@pytest.mark.parametrize(
    "command,words",
    [
        ([""], "command[0] is empty"),
        (["   ", "x"], "command[0] is empty or blank"),  # arguments are kept as sent
        (["python", "ok", f"bad{NUL}"], "command[2] contains a NUL byte"),
    ],
    ids=["empty program", "blank program", "nul in the third"],
)
def test_commands_no_program_can_run_are_refused(world, command, words):
    before = _state(world)
    p = _problem(world.post("member", "/workloads", json={"gpus": 1, "command": command}), 422)
    assert words in p["detail"] and p["errors"][0]["field"].endswith("command")
    assert _state(world) == before


@pytest.fixture(params=DB_PARAMS)
def roomy(request, tmp_path):
    """The app with a 4 MiB body limit (the usual test app refuses bodies over 64 KiB),
    so commands larger than the kernel takes can be sent; (client, member headers)."""
    gen = make_store(request.param, tmp_path)
    store = next(gen)
    clock = ManualClock(1_780_000_000.0)
    settings = Settings(database_url=store.url, start_loops=False, max_body_bytes=4 << 20)
    app = build_system(
        SystemSettings(server=settings), FakeEngine(FakeExecutor(clock)), clock=clock, store=store
    ).app
    seed(app.state.ctx)
    with TestClient(app, raise_server_exceptions=False) as client:
        token = issue_token(app.state.ctx, "ann", "test", None).token
        yield client, {"Authorization": f"Bearer {token}"}
    gen.close()


def test_an_argument_longer_than_the_kernel_takes_is_refused(roomy):
    client, h = roomy
    limit = os_arg_limits()
    assert limit.arg_strlen_max == LINUX_MAX_ARG_STRLEN  # Linux
    ok = client.post(
        API + "/workloads", headers=h, json={"gpus": 1, "command": ["echo", "x" * 131071]}
    )
    assert ok.status_code == 201, ok.text
    r = client.post(
        API + "/workloads", headers=h, json={"gpus": 1, "command": ["echo", "x" * 131072]}
    )
    p = _problem(r, 422)
    assert "command[1] is 131072 bytes" in p["detail"] and "at most 131071" in p["detail"]


def test_a_whole_argv_longer_than_arg_max_is_refused(roomy):
    client, h = roomy
    limit = os_arg_limits()
    n = limit.arg_max // 100_000 + 1
    r = client.post(
        API + "/workloads", headers=h, json={"gpus": 1, "command": ["echo"] + ["y" * 100_000] * n}
    )
    p = _problem(r, 422)
    assert "the operating system accepts at most" in p["detail"] and "ARG_MAX" in p["detail"]


# (role, method, path, body): a NUL byte in one string field of each kind of request body
NUL_BODIES = [
    ("member", "POST", "/workloads", {"gpus": 1, "name": f"a{NUL}b", "command": ["x"]}),
    ("member", "POST", "/workloads", {"gpus": 1, "tenant": f"lab{NUL}", "command": ["x"]}),
    ("member", "POST", "/workloads", {"gpus": 1, "gpu_model": f"H{NUL}", "command": ["x"]}),
    ("member", "POST", "/workloads", {"profile": f"p{NUL}", "command": ["x"]}),
    ("admin", "POST", "/tenants", {"name": f"t{NUL}x"}),
    ("admin", "POST", "/tenants", {"name": "t", "quota": {"guaranteed_by_model": {NUL: 1}}}),
    ("admin", "POST", "/users", {"name": f"u{NUL}"}),
    ("admin", "POST", "/users", {"name": "u", "password": f"longenough{NUL}"}),
    ("admin", "PATCH", "/users/ann", {"unix_user": f"ann{NUL}"}),
    ("member", "POST", "/tokens", {"name": f"laptop{NUL}"}),
    ("admin", "POST", "/tokens", {"user": f"ann{NUL}"}),
    ("admin", "PUT", "/profiles/p", {"gpus": 1, "description": f"d{NUL}"}),
    ("admin", "PUT", "/profiles/p", {"gpus": 1, "tenants": ["lab", f"x{NUL}"]}),
    ("admin", "PUT", "/nodes/n9", {"labels": {"zone": f"a{NUL}"}}),
    (
        "admin",
        "PUT",
        "/nodes/n9",
        {"gpus": [{"index": 0, "uuid": f"GPU-{NUL}", "model": "H100", "memory_mib": 1}]},
    ),
]


@pytest.mark.parametrize("role,method,path,body", NUL_BODIES, ids=range(len(NUL_BODIES)))
def test_a_nul_byte_in_any_body_string_is_422(world, role, method, path, body):
    before = _state(world)
    r = world.client.request(method, API + path, headers=world.h(role), json=body)
    p = _problem(r, 422)
    # names and unix_user have a stricter rule that a NUL breaks first
    assert any(w in p["detail"] for w in ("NUL byte", "not allowed", "should match")), p
    assert _state(world) == before


def test_login_with_a_nul_byte_is_422_not_500(world):
    r = world.client.post(API + "/auth/login", json={"username": f"ann{NUL}", "password": "x"})
    assert "NUL byte" in _problem(r, 422)["detail"]


@pytest.mark.parametrize(
    "path",
    [
        "/workloads/w-%00",
        "/workloads?tenant=lab%00",
        "/workloads?user=ann%00x",
        "/queue?tenant=%00",
        "/users/ann%00",
        "/tenants/lab%00",
        "/events?tenant=lab%00",
        "/usage?tenant=lab%00",
    ],
)
def test_a_nul_byte_in_the_path_or_query_is_422(world, path):
    p = _problem(world.get("admin", path), 422)
    assert "NUL byte" in p["detail"]


@pytest.mark.parametrize(
    "name",
    [".", "..", "-rf", "lab/..", "lab/.", "../etc", "a//b", "/lab", "lab/", "lab/-x", "a..b", ".x"],
)
def test_tenant_names_that_could_be_paths_or_options_are_refused(world, name):
    before = _state(world)
    p = _problem(world.post("admin", "/tenants", json={"name": name}), 422)
    assert "segments joined by '/'" in p["detail"], p  # says the rule
    assert "pattern" in p["detail"]
    assert _state(world) == before


@pytest.mark.parametrize("name", ["physics", "physics/lab-a", "lab_2.v1", "_x"])
def test_good_tenant_names_are_accepted(world, name):
    r = world.post("admin", "/tenants", json={"name": name})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("name", [".", "..", "-rf", "a..b", ".x", "@x", "a/b", "a b", ""])
def test_user_names_that_could_be_paths_or_options_are_refused(world, name):
    p = _problem(world.post("admin", "/users", json={"name": name}), 422)
    assert p["errors"][0]["field"] == "body.name"
    if name:
        assert "letters, digits" in p["detail"], p


@pytest.mark.parametrize("name", ["bob", "bob.smith@lab.org", "_svc", "u-1"])
def test_good_user_names_are_accepted(world, name):
    r = world.post("admin", "/users", json={"name": name})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("unix_user", ["-rf", "Root", "a b", "../x", "x" * 65])
def test_patch_users_checks_unix_user_as_create_does(world, unix_user):
    created = world.post("admin", "/users", json={"name": "bob", "unix_user": unix_user})
    _problem(created, 422)
    p = _problem(world.patch("admin", "/users/ann", json={"unix_user": unix_user}), 422)
    assert p["errors"][0]["field"] == "body.unix_user"
    assert world.get("admin", "/users/ann").json()["unix_user"] is None


def test_patch_users_sets_and_clears_a_good_unix_user(world):
    r = world.patch("admin", "/users/ann", json={"unix_user": "ann_1"})
    assert r.status_code == 200 and r.json()["unix_user"] == "ann_1"
    r = world.patch("admin", "/users/ann", json={"unix_user": ""})
    assert r.status_code == 200 and r.json()["unix_user"] is None


NON_FINITE = [
    ("POST", "/tenants", b'{"name": "t1", "idle_timeout_s": Infinity}', "idle_timeout_s"),
    ("POST", "/tenants", b'{"name": "t1", "idle_timeout_s": NaN}', "idle_timeout_s"),
    ("POST", "/tenants", b'{"name": "t1", "idle_timeout_s": -5}', "idle_timeout_s"),
    ("POST", "/tenants", b'{"name": "t1", "idle_timeout_s": 1e300}', "idle_timeout_s"),
    ("PATCH", "/tenants/lab", b'{"idle_timeout_s": Infinity}', "idle_timeout_s"),
    ("PATCH", "/tenants/lab", b'{"idle_timeout_s": -Infinity}', "idle_timeout_s"),
    ("PATCH", "/tenants/lab", b'{"quota": {"weight": Infinity}}', "weight"),
    ("PATCH", "/tenants/lab", b'{"quota": {"guaranteed": NaN}}', "guaranteed"),
    ("POST", "/workloads", b'{"gpus": 1, "cpus": NaN, "command": ["x"]}', "cpus"),
    ("POST", "/workloads", b'{"gpu_fraction": NaN, "command": ["x"]}', "gpu_fraction"),
    ("POST", "/tokens", b'{"expires_in_s": Infinity}', "expires_in_s"),
]


@pytest.mark.parametrize("method,path,raw,field", NON_FINITE, ids=range(len(NON_FINITE)))
def test_non_finite_and_negative_numbers_are_refused(world, method, path, raw, field):
    before = _state(world)
    headers = {**world.h("admin"), "content-type": "application/json"}
    r = world.client.request(method, API + path, headers=headers, content=raw)
    p = _problem(r, 422)
    assert p["errors"][0]["field"].endswith(field), p
    assert _state(world) == before
    assert world.get("admin", "/tenants/lab").json()["idle_timeout_s"] is None


def test_a_non_finite_query_number_is_refused(world):
    _problem(world.get("admin", "/events?since=inf"), 422)
    _problem(world.get("admin", "/events?since=nan"), 422)
    assert world.get("admin", "/events?since=0").status_code == 200
