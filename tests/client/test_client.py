"""gpupool.client against a real server (uvicorn in a thread, the scheduler loop running, a
scripted fake executor: `echo ...` prints and succeeds, `exit N` fails, anything else keeps
running). Waits take an injected clock; nothing here sleeps for timing."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import gpupool
from gpupool.api.workloads import WorkloadDetailOut, WorkloadIn, WorkloadOut
from gpupool.client import (
    ApiError,
    AsyncClient,
    BadRequest,
    Client,
    IncompatibleServer,
    InvalidInput,
    NotFound,
    Unauthorized,
    Unreachable,
    WaitTimeout,
    save_config,
)
from gpupool.store import WorkloadRepo
from tests.cli.test_client import as_, server  # noqa: F401 - fixtures
from tests.support import free_port


class FakeTime:
    """`sleep`/`monotonic` for a client: sleeping advances the clock, at once."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.now += s

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def ann(server):  # noqa: F811
    url, ctx = server
    t = FakeTime()
    with Client(url, as_(ctx, "ann"), sleep=t.sleep, monotonic=t.monotonic) as c:
        yield c


def test_submit_wait_and_logs_are_typed(ann):
    w = ann.submit(gpus=1, command=["echo", "hello"], name="first")
    assert isinstance(w, WorkloadOut) and w.owner == "ann" and w.request.gpus == 1
    done = ann.wait(w.id, timeout_s=60, poll_s=0.01)
    assert isinstance(done, WorkloadDetailOut) and done.state == "succeeded"
    assert done.events[0].kind == "workload.submitted"
    assert "".join(ann.stream_logs(w.id)) == "hello\n"
    assert ann.logs(w.id, tail=1).text == "hello\n"
    assert [x.id for x in ann.workloads(mine=True)] == [w.id]


def test_a_fractional_sweep_with_sizes_in_units(ann):
    ids = [
        ann.submit(gpu_fraction=0.25, gpu_memory="10G", command=["sleep", str(i)]).id
        for i in range(6)
    ]
    ws = [ann.workload(i) for i in ids]
    assert {w.request.gpu_memory_mib for w in ws} == {10240}
    queue = ann.queue()
    assert all(e.reason for e in queue)


def test_refusals_are_typed_errors_with_the_servers_message(ann, server):  # noqa: F811
    url, _ = server
    with pytest.raises(NotFound) as e:
        ann.workload("w-nothing")
    assert e.value.status == 404 and "no workload" in e.value.message
    with pytest.raises(BadRequest) as e:
        ann.submit(gpus=9, command=["x"])
    assert e.value.status == 422 and "needs 9 GPUs" in str(e.value)
    assert e.value.problem and e.value.problem["status"] == 422
    with pytest.raises(Unauthorized):
        Client(url, "gp_forged").me()
    with pytest.raises(Unreachable) as e:
        Client(f"http://127.0.0.1:{free_port()}", "t").me()
    assert "not reachable" in str(e.value) and "GPUPOOL_URL" in str(e.value)


def test_bad_input_raises_before_sending_and_says_what_to_do(ann):
    with pytest.raises(InvalidInput, match=r"give a size with a unit, e.g. '20G'"):
        ann.submit(gpu_fraction=0.5, gpu_memory="lots", command=["x"])
    with pytest.raises(InvalidInput, match="not a field of a workload; the fields are"):
        ann.submit(gpu=1, command=["x"])
    with pytest.raises(InvalidInput, match="gpu_fraction"):
        ann.submit(gpu_fraction=2, command=["x"])
    with pytest.raises(InvalidInput, match="give one or more of"):
        ann.wait("w-x", until="done")
    with pytest.raises(InvalidInput, match="YYYY-MM-DD"):
        ann.usage("user", from_="last month")
    with pytest.raises(InvalidInput, match="with its scheme"):
        Client("gpupool.example.org", "t")


def test_wait_times_out_on_the_injected_clock(server):  # noqa: F811
    url, ctx = server
    t = FakeTime()
    with Client(url, as_(ctx, "ann"), sleep=t.sleep, monotonic=t.monotonic) as c:
        w = c.submit(gpus=1, command=["sleep", "100"])
        c.wait(w.id, "running", timeout_s=60, poll_s=0.001)  # the loop admits it soon
        with pytest.raises(WaitTimeout) as e:
            c.wait(w.id, timeout_s=30, poll_s=10)
    assert e.value.last.state == "running" and "still running after 30 s" in str(e.value)
    assert t.slept[-3:] == [10, 10, 10]


class CutsFirstSubmission(httpx.HTTPTransport):
    """Delivers every request; the answer to the first POST /workloads is lost."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and request.url.path.endswith("/workloads"):
            self.keys.append(request.headers.get("idempotency-key"))
            if len(self.keys) == 1:
                response.read()
                raise httpx.ReadError("connection reset by peer", request=request)
        return response


def test_a_lost_submission_is_retried_with_the_same_key_and_made_once(server):  # noqa: F811
    url, ctx = server
    cut, t, said = CutsFirstSubmission(), FakeTime(), []
    c = Client(url, as_(ctx, "ann"), transport=cut, sleep=t.sleep, monotonic=t.monotonic)
    w = c.submit(WorkloadIn(gpus=1, command=["sleep", "1"]), on_retry=lambda e, s: said.append(s))
    assert len(cut.keys) == 2 and cut.keys[0] and cut.keys[0] == cut.keys[1]
    assert said == [1.0] and t.slept == [1.0]
    with ctx.store.read() as s:
        assert [r.workload.id for r in WorkloadRepo(s).list()] == [w.id]


def _answers(routes: dict[str, tuple[int, object]]) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        status, body = routes.get(request.url.path, (404, "<html>not found</html>"))
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    return httpx.MockTransport(handle)


def test_newer_servers_fields_are_ignored_and_older_servers_named(ann):
    w = ann.submit(gpus=1, command=["echo", "x"]).model_dump(mode="json")
    newer = w | {"a_field_from_the_future": {"x": 1}}
    c = Client(
        "http://new",
        "t",
        transport=_answers({f"/api/v1/workloads/{w['id']}": (200, newer | {"events": []})}),
    )
    assert c.workload(w["id"]).id == w["id"]
    old = Client("http://old", "t", transport=_answers({"/healthz": (200, {"status": "ok"})}))
    with pytest.raises(
        IncompatibleServer, match="older than this client supports.*upgrade the server"
    ):
        old.check_server()
    other = Client("http://other", "t", transport=_answers({}))
    with pytest.raises(IncompatibleServer, match="does not answer like a gpupool server"):
        other.check_server()
    assert ann.check_server() == gpupool.__version__
    healthy = {"/healthz": (200, {"status": "ok", "version": gpupool.__version__})}
    odd = Client("http://odd", "t", transport=_answers(healthy | {"/api/v1/auth/me": (200, {})}))
    with pytest.raises(IncompatibleServer, match="does not fit gpupool client"):
        odd.me()
    # the symptoms of a server that is not gpupool are said as such
    with pytest.raises(IncompatibleServer, match="does not answer like a gpupool server"):
        other.workload("w-1")
    gone = Client("http://old", "t", transport=_answers({"/healthz": (200, {"status": "ok"})}))
    with pytest.raises(IncompatibleServer, match="older than this client supports"):
        gone.me()


def test_url_and_token_come_from_the_environment_or_the_login_file(server, tmp_path, monkeypatch):  # noqa: F811
    url, ctx = server
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("GPUPOOL_URL", raising=False)
    monkeypatch.delenv("GPUPOOL_TOKEN", raising=False)
    save_config(url, as_(ctx, "ann"))
    assert Client().me().name == "ann"
    monkeypatch.setenv("GPUPOOL_TOKEN", as_(ctx, "otto"))
    assert Client().me().name == "otto"
    monkeypatch.setenv("GPUPOOL_URL", f"http://127.0.0.1:{free_port()}")
    with pytest.raises(Unreachable):
        Client().me()


def test_the_async_client_is_the_same_api(server):  # noqa: F811
    url, ctx = server
    token = as_(ctx, "ann")

    async def go() -> tuple[str, str, str]:
        async with AsyncClient(url, token) as c:
            w = await c.submit(gpus=1, command=["echo", "async"])
            done = await c.wait(w.id, timeout_s=60, poll_s=0.01)
            text = "".join([t async for t in c.stream_logs(w.id, follow=False)])
            try:
                await c.workload("w-nothing")
            except NotFound as e:
                return done.state, text, e.message
        raise AssertionError("no NotFound")

    state, text, missing = asyncio.run(go())
    assert (state, text) == ("succeeded", "async\n") and "no workload" in missing


def test_an_unknown_tenant_is_refused_with_what_to_do(ann):
    with pytest.raises(ApiError) as e:
        ann.submit(gpus=1, tenant="no-such-lab", command=["x"])
    assert "no-such-lab" in e.value.message and e.value.status in (403, 404, 422)
    with pytest.raises(NotFound) as e:
        ann.tenant("no-such-lab")
    assert "no-such-lab" in e.value.message
