"""`gpupool run` sends an Idempotency-Key and reuses it when it retries: a submission whose
answer was lost (the connection cut after the server took it) is not made twice. The server
is real; only the network fault is injected."""

from __future__ import annotations

import httpx

from gpupool.cli import submit
from gpupool.client import sync as sdk_sync
from gpupool.store import WorkloadRepo
from tests.cli.test_client import as_, env, gp, server  # noqa: F401 - fixtures

REAL_CLIENT = httpx.Client


class CutsFirstSubmission(httpx.HTTPTransport):
    """Delivers every request; the answer to the first POST /workloads is lost."""

    seen: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if request.method == "POST" and request.url.path.endswith("/workloads"):
            self.seen.append(request.headers.get("idempotency-key"))
            if len(self.seen) == 1:
                response.read()
                raise httpx.ReadError("connection reset by peer", request=request)
        return response


def test_run_retries_a_cut_submission_with_the_same_key(env, monkeypatch):  # noqa: F811
    _, ctx = env
    CutsFirstSubmission.seen = []
    monkeypatch.setattr(
        sdk_sync.httpx,
        "Client",
        lambda **kw: REAL_CLIENT(**(kw | {"transport": CutsFirstSubmission()})),
    )
    monkeypatch.setattr(submit, "SUBMIT_MAX_WAIT_S", 0.0)
    r = gp("run", "--gpus", "1", "--", "sleep", "100", token=as_(ctx, "ann"))
    assert r.exit_code == 0, r.output
    assert "retrying" in r.output
    keys = CutsFirstSubmission.seen
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1]
    with ctx.store.read() as s:
        made = WorkloadRepo(s).list()
    assert [w.workload.id for w in made] == [r.output.strip().splitlines()[-1]]


def test_each_run_uses_a_new_key(env, monkeypatch):  # noqa: F811
    _, ctx = env
    CutsFirstSubmission.seen = ["-"]  # nothing is cut
    monkeypatch.setattr(
        sdk_sync.httpx,
        "Client",
        lambda **kw: REAL_CLIENT(**(kw | {"transport": CutsFirstSubmission()})),
    )
    t = as_(ctx, "ann")
    for _ in range(2):
        assert gp("run", "--gpus", "1", "--", "sleep", "100", token=t).exit_code == 0
    keys = CutsFirstSubmission.seen[1:]
    assert len(keys) == 2 and keys[0] != keys[1]
    with ctx.store.read() as s:
        assert len(WorkloadRepo(s).list()) == 2
