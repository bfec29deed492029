"""The pieces of `gpupool up --workers N`: what a worker serves itself, forwarding the rest
to the primary over its Unix socket, the bus between the processes, and SQLite writers of
several processes taking turns (the end-to-end run is in tests/cli/test_up_workers.py)."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import threading
from pathlib import Path

import httpx
import pytest
from fastapi import Request
from fastapi.testclient import TestClient
from sqlalchemy import text

from gpupool.clock import ManualClock
from gpupool.engines.fake.engine import FakeEngine
from gpupool.engines.fake.executor import FakeExecutor
from gpupool.server.app import create_app
from gpupool.server.bus import PRIMARY, Bus
from gpupool.server.forward import served_locally
from gpupool.server.routes import iter_routes
from gpupool.server.services.accounts import issue_token
from gpupool.server.settings import Settings
from gpupool.server.workers import (
    PrimaryOnlyExecutor,
    api_socket,
    attach_bus,
    listen_tcp,
    listen_unix,
    run_dir,
)
from gpupool.store import open_store
from gpupool.system import SystemSettings, build_system
from gpupool.web import create_router
from tests.server.conftest import API, PASSWORD, USERS, seed
from tests.support import ServedApp

#: Every route a worker answers itself; all others go to the primary. Changing what a worker
#: serves means changing this list on purpose: a local route must need nothing but the
#: database (no executor, no loop state, no telemetry).
LOCAL = {
    ("GET", "/healthz"),
    ("GET", f"{API}/auth/me"),
    ("POST", f"{API}/auth/login"),
    ("GET", f"{API}/workloads"),
    ("POST", f"{API}/workloads"),
    ("GET", f"{API}/workloads/{{workload_id}}"),
    ("GET", f"{API}/queue"),
    ("GET", f"{API}/nodes"),
    ("GET", f"{API}/nodes/{{name}}"),
    ("GET", f"{API}/gpus"),
    ("GET", f"{API}/gpus/{{uuid}}"),
    ("GET", f"{API}/profiles"),
    ("GET", f"{API}/profiles/{{name}}"),
    ("GET", f"{API}/users"),
    ("GET", f"{API}/users/{{name}}"),
    ("GET", f"{API}/tenants"),
    ("GET", f"{API}/tenants/{{name:path}}"),
    ("GET", f"{API}/usage"),
    ("GET", f"{API}/events"),
    ("GET", f"{API}/tokens"),
}


def _sample(template: str) -> str:
    """A concrete path for a route template ({x} and {x:path} filled in)."""
    out, i = "", 0
    while i < len(template):
        if template[i] == "{":
            j = template.index("}", i)
            out += "lab/sub" if template[i:j].endswith(":path") else "x1"
            i = j + 1
        else:
            out += template[i]
            i += 1
    return out


@pytest.fixture
def store(tmp_path):
    s = open_store(f"sqlite:///{tmp_path / 'gpupool.db'}")
    yield s
    s.close()


def test_a_worker_serves_exactly_the_listed_routes_itself(store):
    app = create_app(
        Settings(database_url=store.url, start_loops=False),
        executor=PrimaryOnlyExecutor(),
        clock=ManualClock(0),
        store=store,
    )
    app.include_router(create_router())  # the dashboard's routes, as gpupool up has them
    local = {(m, t) for m, t in iter_routes(app.routes) if served_locally(m, _sample(t))}
    assert local == LOCAL
    # and nothing below the local ones leaks: logs, dashboard data and metrics are forwarded
    for method, path in (
        ("GET", f"{API}/workloads/w-1/logs"),
        ("DELETE", f"{API}/workloads/w-1"),
        ("GET", f"{API}/dashboard/cluster"),
        ("GET", "/metrics"),
        ("GET", "/readyz"),
        ("GET", "/services/gpupool/dashboard/cluster"),
    ):
        assert not served_locally(method, path), (method, path)
    assert served_locally("HEAD", "/healthz")


class Primary:
    """A primary app (fake executor, the test seed) served by uvicorn on a Unix socket."""

    def __init__(self, store, run: Path):
        self.clock = ManualClock(1_780_000_000.0)
        self.executor = FakeExecutor(self.clock)
        settings = Settings(database_url=store.url, start_loops=False, max_body_bytes=4096)
        self.system = build_system(
            SystemSettings(server=settings),
            FakeEngine(self.executor),
            clock=self.clock,
            store=store,
        )
        self.app = self.system.app
        self.ctx = self.app.state.ctx
        seed(self.ctx)
        self.served = ServedApp(self.app, sock=listen_unix(api_socket(run)))

    def __enter__(self) -> Primary:
        self.served.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.served.stop()


@pytest.fixture
def pair(store, tmp_path):
    """(primary, worker TestClient) sharing one SQLite file, the worker forwarding."""
    run = run_dir(tmp_path)
    with Primary(store, run) as primary:
        worker_store = open_store(store.url, migrate=False)
        settings = Settings(database_url=store.url, start_loops=False, max_body_bytes=4096)
        app = create_app(
            settings,
            executor=PrimaryOnlyExecutor(),
            clock=primary.clock,
            store=worker_store,
            forward_to=str(api_socket(run)),
        )
        app.state.ctx.process = "worker-1"
        with TestClient(app, raise_server_exceptions=False) as client:
            yield primary, client
        worker_store.close()


def _h(primary: Primary, role: str) -> dict[str, str]:
    token = issue_token(primary.ctx, USERS[role], "t", None).token
    return {"Authorization": f"Bearer {token}"}


def test_forwarded_requests_reach_the_primary_unchanged(pair):
    primary, worker = pair
    admin = _h(primary, "admin")
    assert worker.get("/healthz").json()["process"] == "worker-1"  # answered by the worker
    # a body, a query string and the caller's own credentials travel to the primary
    r = worker.post(f"{API}/tenants", json={"name": "lab/sub"}, headers=admin)
    assert r.status_code == 201, r.text
    assert r.json()["name"] == "lab/sub"
    assert worker.get(f"{API}/tenants/lab/sub", headers=admin).status_code == 200  # local
    r = worker.post(f"{API}/tenants", json={"name": "x"}, headers=_h(primary, "member"))
    assert r.status_code == 403 and r.headers["content-type"].startswith("application/problem")
    # work is started by the primary's executor, and stopped there when cancelled
    wid = worker.post(
        f"{API}/workloads", json={"gpus": 1, "command": ["true"]}, headers=_h(primary, "member")
    ).json()["id"]
    primary.ctx.loops.get("scheduler").run_once()
    assert primary.executor.world.processes[wid].state.alive
    r = worker.delete(f"{API}/workloads/{wid}", headers=_h(primary, "member"))
    assert r.status_code == 200, r.text
    assert [c[0] for c in primary.executor.stop_calls] == [wid]
    # live state that only the primary has; /metrics answers only local clients (no scrape
    # token here), and the primary judges the worker's client, not the worker
    assert worker.get("/metrics").status_code == 403  # the worker's client is "testclient"
    assert worker.get("/readyz").json()["status"] == "ready"


@pytest.mark.parametrize("trusted", [None, "*"])
def test_the_primary_learns_the_client_of_a_forwarded_request_from_the_worker(
    store, tmp_path, monkeypatch, trusted
):
    # FORWARDED_ALLOW_IPS=* makes uvicorn trust the primary's Unix socket too: it fills in
    # the client from the worker's X-Forwarded-For before the primary's own middleware runs
    if trusted is None:
        monkeypatch.delenv("FORWARDED_ALLOW_IPS", raising=False)
    else:
        monkeypatch.setenv("FORWARDED_ALLOW_IPS", trusted)
    run = run_dir(tmp_path)
    primary = Primary(store, run)

    @primary.app.get("/test-client")
    def client_of(request: Request) -> dict:
        return {
            "host": request.client.host if request.client else None,
            "scheme": request.url.scheme,
        }

    def worker_app():
        return create_app(
            Settings(database_url=store.url, start_loops=False),
            executor=PrimaryOnlyExecutor(),
            clock=primary.clock,
            store=open_store(store.url, migrate=False),
            forward_to=str(api_socket(run)),
        )

    with primary:
        app = worker_app()
        with TestClient(app) as worker:  # its peer address is "testclient"
            seen = {"host": "testclient", "scheme": "http"}
            assert worker.get("/test-client").json() == seen
            # what a caller claims is replaced by what the worker saw
            spoofed = {"x-forwarded-for": "203.0.113.9", "x-forwarded-proto": "https"}
            assert worker.get("/test-client", headers=spoofed).json() == seen
            # so a remote client cannot pass for a local one to read /metrics
            local = {"x-forwarded-for": "127.0.0.1"}
            assert worker.get("/metrics", headers=local).status_code == 403
        app.state.ctx.store.close()
        app = worker_app()
        with TestClient(app, client=("127.0.0.1", 50000)) as worker:  # a client on this host
            r = worker.get("/metrics")
            assert r.status_code == 200 and "gpupool_scheduler_cycle_seconds" in r.text
            # ... unless it came through a proxy: the worker replaces the headers that say
            # so, and tells the primary (which would otherwise see a local client)
            for proxied in ({"x-forwarded-for": "127.0.0.1"}, {"x-forwarded-proto": "https"}):
                assert worker.get("/metrics", headers=proxied).status_code == 403, proxied
            # a caller cannot set the worker's mark either way
            r = worker.get("/metrics", headers={"x-gpupool-via-proxy": "0"})
            assert r.status_code == 200
        app.state.ctx.store.close()


def test_an_oversized_body_is_refused_by_the_worker_before_forwarding(pair):
    primary, worker = pair
    body = {"name": "y" * 10_000}
    r = worker.post(f"{API}/tenants", json=body, headers=_h(primary, "admin"))
    assert r.status_code == 413
    assert worker.get(f"{API}/tenants", headers=_h(primary, "admin")).status_code == 200


def test_a_change_forwarded_by_a_worker_drops_its_cached_tokens(pair):
    primary, worker = pair
    token = issue_token(primary.ctx, "ann", "t", None)
    h = {"Authorization": f"Bearer {token.token}"}
    assert worker.get(f"{API}/auth/me", headers=h).status_code == 200  # now cached here
    r = worker.delete(f"{API}/tokens/{token.id}", headers=h)  # revoked at the primary
    assert r.status_code == 200, r.text
    assert worker.get(f"{API}/auth/me", headers=h).status_code == 401


def test_a_worker_answers_503_while_the_primary_is_away(store, tmp_path):
    run = run_dir(tmp_path)
    settings = Settings(database_url=store.url, start_loops=False)
    app = create_app(
        settings,
        executor=PrimaryOnlyExecutor(),
        clock=ManualClock(0),
        store=store,
        forward_to=str(api_socket(run)),
    )
    with TestClient(app, raise_server_exceptions=False) as client:
        r = client.get("/readyz")
        assert r.status_code == 503
        assert r.headers["content-type"].startswith("application/problem+json")
        assert "retry" in r.json()["detail"]
        assert client.get("/healthz").status_code == 200  # what it serves itself still works


def test_the_bus_carries_notices_between_named_processes(tmp_path):
    run = run_dir(tmp_path)
    got: dict[str, list[str]] = {"primary": [], "worker-1": [], "worker-2": []}
    seen = threading.Condition()

    def handler(name: str):
        def handle(text: str) -> None:
            with seen:
                got[name].append(text)
                seen.notify_all()

        return handle

    buses = {name: Bus(run, name, handler(name)) for name in got}
    try:
        assert buses["worker-1"].send(PRIMARY, "wake scheduler")
        assert buses["primary"].broadcast("auth changed") == 2  # everyone but itself
        assert not buses["primary"].send("worker-9", "hello")  # nobody there: no error
        with seen:
            assert seen.wait_for(
                lambda: got["worker-1"] and got["worker-2"] and got["primary"], timeout=10
            )
        assert got == {
            "primary": ["wake scheduler"],
            "worker-1": ["auth changed"],
            "worker-2": ["auth changed"],
        }
    finally:
        for b in buses.values():
            b.close()
    assert not list(run.glob("*.bus"))  # each cleans up its socket


def test_notices_wake_loops_and_clear_the_token_cache(store, tmp_path, caplog):
    app = build_system(
        SystemSettings(server=Settings(database_url=store.url, start_loops=False)),
        FakeEngine(),
        clock=ManualClock(0),
        store=store,
    ).app
    ctx = app.state.ctx
    handle = ctx.on_notice
    handle("wake scheduler")
    assert ctx.loops.get("scheduler")._woken.is_set()
    ctx.auth_cache.put("digest", 0.0, object(), None)  # type: ignore[arg-type]
    handle("auth changed")
    assert ctx.auth_cache.get("digest", 0.0) is None
    handle("something unknown")  # logged, not raised
    assert "unknown message 'something unknown'" in caplog.text


def test_a_worker_without_loops_wakes_the_primary_through_the_bus(store, tmp_path):
    run = run_dir(tmp_path)
    woken = threading.Event()
    primary = Bus(run, PRIMARY, lambda text: text == "wake scheduler" and woken.set())
    app = create_app(
        Settings(database_url=store.url, start_loops=False),
        executor=PrimaryOnlyExecutor(),
        clock=ManualClock(0),
        store=store,
    )
    bus = attach_bus(app.state.ctx, run, "worker-1")
    try:
        app.state.ctx.wake_scheduler()
        assert woken.wait(10)
    finally:
        bus.close()
        primary.close()


def test_the_run_dir_is_private_and_short_enough_for_sockets(tmp_path):
    run = run_dir(tmp_path)
    assert run == tmp_path / "run" and (run.stat().st_mode & 0o777) == 0o700
    deep = tmp_path / ("d" * 120)
    far = run_dir(deep)
    assert len(str(far / "worker-999.bus")) <= 107 and (far.stat().st_mode & 0o777) == 0o700
    assert run_dir(deep) == far  # the same data dir always gets the same run dir


def test_the_primary_holds_the_port_without_taking_connections(tmp_path):
    held = listen_tcp("127.0.0.1", 0, shared=True, listen=False)
    port = held.getsockname()[1]
    try:
        with pytest.raises(OSError):  # another program cannot take it
            listen_tcp("127.0.0.1", port, shared=False)
        with pytest.raises(httpx.ConnectError):  # and nobody answers until a worker listens
            httpx.get(f"http://127.0.0.1:{port}/", timeout=2)
        worker = listen_tcp("127.0.0.1", port, shared=True)  # a worker joins the port
        worker.close()
    finally:
        held.close()


# -- SQLite writers of several processes -------------------------------------------------


def test_a_write_transaction_holds_the_cross_process_lock(store):
    lock_file = Path(make_path(store.url) + ".writelock")
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        with store.write() as s:
            s.execute(text("SELECT 1"))
            with pytest.raises(BlockingIOError):  # another process would wait here
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again once it committed
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def make_path(url: str) -> str:
    return url.removeprefix("sqlite:///")


def _increment(url: str, times: int, go) -> None:  # noqa: ANN001 - runs in a child process
    s = open_store(url, migrate=False)
    go.wait()
    for _ in range(times):
        with s.write() as tx:  # read, then write back: lost updates show if turns break
            n = tx.execute(text("SELECT n FROM counter")).scalar_one()
            tx.execute(text("UPDATE counter SET n = :n"), {"n": n + 1})
    s.close()


def test_writers_in_several_processes_take_turns_without_losing_updates(store):
    with store.write() as s:
        s.execute(text("CREATE TABLE counter (n INTEGER NOT NULL)"))
        s.execute(text("INSERT INTO counter VALUES (0)"))
    mp = multiprocessing.get_context("spawn")
    go = mp.Event()
    procs = [mp.Process(target=_increment, args=(store.url, 40, go)) for _ in range(3)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    with store.read() as s:
        assert s.execute(text("SELECT n FROM counter")).scalar_one() == 120


def test_the_checkpoint_loop_moves_the_log_into_the_database_file(tmp_path):
    from gpupool.server.loops.checkpoint import CheckpointLoop

    db = tmp_path / "g.db"
    store = open_store(f"sqlite:///{db}", wal_autocheckpoint=False)
    try:
        app = build_system(
            SystemSettings(server=Settings(database_url=store.url, start_loops=False)),
            FakeEngine(),
            clock=ManualClock(0),
            store=store,
        ).app
        loop = app.state.ctx.loops.get("checkpoint")
        assert isinstance(loop, CheckpointLoop)
        with store.write() as tx:
            tx.execute(text("CREATE TABLE t (x TEXT)"))
            for i in range(500):
                tx.execute(text("INSERT INTO t VALUES (:x)"), {"x": "x" * 1000 + str(i)})
        with store.engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA wal_autocheckpoint").scalar_one() == 0
        before = db.stat().st_size  # no writer copied the ~500 kB of new rows into the file
        assert before < 400_000
        loop.run_once()
        assert db.stat().st_size > before + 400_000
    finally:
        store.close()


# -- the supervisor ----------------------------------------------------------------------


def test_the_supervisor_restarts_a_dying_worker_then_gives_up(tmp_path):
    import sys

    from gpupool.server.workers import worker_supervisor
    from gpupool.supervise import MAX_RESTARTS_PER_MINUTE

    starts = tmp_path / "starts"
    code = f"open({str(starts)!r}, 'a').write('x'); raise SystemExit(3)"
    gone = threading.Event()
    sup = worker_supervisor(
        1, lambda i: [sys.executable, "-c", code], on_all_gone=gone.set, check_every_s=0.05
    )
    sup.start()
    try:
        assert gone.wait(60), "the supervisor never gave up"
        assert starts.read_text() == "x" * (1 + MAX_RESTARTS_PER_MINUTE)
        assert sup.pids == []
    finally:
        sup.stop()


def test_the_supervisor_stops_workers_by_closing_their_stdin(tmp_path):
    import sys

    from gpupool.server.workers import worker_supervisor

    # a worker that, like the real one, serves until its stdin (the primary's pipe) closes
    code = "import sys; sys.stdin.buffer.read(); raise SystemExit(0)"
    sup = worker_supervisor(2, lambda i: [sys.executable, "-c", code], check_every_s=0.05)
    sup.start()
    procs = list(sup.procs.values())
    assert len(sup.pids) == 2
    sup.stop()
    assert [p.returncode for p in procs] == [0, 0]  # ended by EOF, not by a signal


def test_logins_through_a_worker_and_the_primary_share_one_throttle(pair):
    """The throttle's counts live in the database: failures served by a worker and by the
    primary add up, and a notice over the bus drops a process's remembered blocks."""
    primary, worker = pair
    wrong = {"username": "ann", "password": "not the password"}
    direct = TestClient(primary.app)
    for client in (worker, direct, worker, direct, worker, direct):  # the sixth blocks
        assert client.post(API + "/auth/login", json=wrong).status_code == 401
    for client in (worker, direct):
        r = client.post(API + "/auth/login", json={**wrong, "password": PASSWORD})
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
    primary.ctx.login_throttle.forget("ann")  # as an admin's password reset does
    r = worker.post(API + "/auth/login", json={**wrong, "password": PASSWORD})
    assert r.status_code == 429  # the worker remembers the block ...
    worker.app.state.ctx.on_notice("auth changed")  # ... until the bus tells it
    r = worker.post(API + "/auth/login", json={**wrong, "password": PASSWORD})
    assert r.status_code == 200, r.text
