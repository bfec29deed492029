"""GET /workloads/{id}/logs (review F6): the whole log streamed as the same JSON object as
before, `?tail=` from the end with long lines cut, `?offset=` pages that never split a
character."""

from __future__ import annotations

from gpupool.domain import Quota, Tenant
from gpupool.engines.common import logread
from gpupool.engines.common.executor import ExecutorError
from gpupool.server.services import lifecycle
from gpupool.store import TenantRepo

LOG = 'epoch 1 "loss" 0.5\\n\n€ größer\n' + "x" * 300 + "\nlast\n"


def _running(world) -> str:
    wid = world.submit("member", gpus=1)["id"]
    assert world.scheduler.run_once().admitted == [wid]
    world.executor.write_log(wid, LOG)
    return wid


def test_a_whole_read_is_the_log_in_one_json_object(world):
    wid = _running(world)
    r = world.get("member", f"/workloads/{wid}/logs")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    want = {"workload_id": wid, "state": "running", "runs": 1, "note": None, "text": LOG}
    assert r.json() == want


def test_pages_rebuild_the_log_without_splitting_characters(world):
    wid = _running(world)
    offset, text, pages = 0, "", 0
    while True:
        page = world.get("member", f"/workloads/{wid}/logs", params={"offset": offset, "limit": 7})
        assert page.status_code == 200, page.text
        body = page.json()
        assert body["offset"] == offset and len(body["text"].encode()) <= 7
        if body["next_offset"] == offset:
            break
        text += body["text"]
        offset, pages = body["next_offset"], pages + 1
    assert text == LOG and offset == len(LOG.encode()) and pages > 40


def test_a_tail_cuts_long_lines_and_says_so(world):
    wid = _running(world)
    long = "y" * (logread.LINE_MAX_BYTES + 10)
    world.executor.write_log(wid, long + "\nend\n")
    got = world.get("member", f"/workloads/{wid}/logs", params={"tail": 2}).json()["text"]
    assert got == "y" * logread.LINE_MAX_BYTES + logread.cut_marker(10).decode() + "end\n"


def test_tail_and_offset_together_are_refused(world):
    wid = _running(world)
    r = world.get("member", f"/workloads/{wid}/logs", params={"tail": 1, "offset": 0})
    assert r.status_code == 422 and "not both" in r.json()["detail"]


def test_a_pending_workload_has_an_empty_log_in_every_form(world):
    wid = world.submit("member", gpus=1)["id"]
    url = f"/workloads/{wid}/logs"
    assert world.get("member", url).json()["text"] == ""
    assert world.get("member", url, params={"tail": 5}).json()["text"] == ""
    page = world.get("member", url, params={"offset": 3}).json()
    assert page["text"] == "" and page["next_offset"] == 3


def _preempted(world) -> tuple[str, str]:
    """A job of "other" that borrowed all 4 GPUs and wrote output, preempted for lab's
    guarantee and requeued; returns (its id, the id of the work it was preempted for)."""
    with world.ctx.store.write() as s:
        TenantRepo(s).save(Tenant("other", Quota.gpus(1, 4)), 0, create=False)
    big = world.submit(role="outsider", gpus=4)["id"]
    world.scheduler.run_once()
    world.executor.write_log(big, "epoch 1\nepoch 2\n")
    world.clock.advance(3600)
    small = world.submit(gpus=2)["id"]
    world.clock.advance(world.ctx.settings.scheduler.reclaim_after_s)
    assert world.scheduler.run_once().preempted == [big]
    return big, small


def test_a_preempted_job_waiting_to_rerun_shows_its_earlier_output_and_says_why(world):
    big, _ = _preempted(world)
    url = f"/workloads/{big}/logs"
    whole = world.get("admin", url).json()
    assert whole["state"] == "pending" and whole["text"] == "epoch 1\nepoch 2\n"
    assert whole["runs"] == 1
    assert "was preempted at " in whole["note"] and "requeued" in whole["note"]
    assert "waits to run again" in whole["note"]
    page = world.get("admin", url, params={"offset": 0}).json()
    assert page["text"] == whole["text"] and page["note"] == whole["note"]
    tail = world.get("admin", url, params={"tail": 1}).json()
    assert tail["text"] == "epoch 2\n" and tail["note"] == whole["note"]


def test_the_next_run_follows_the_earlier_output_after_a_separator(world):
    big, small = _preempted(world)
    world.scheduler.run_once()  # the reclaimed GPUs go to lab's job
    world.executor.finish(small)
    lifecycle.settle(world.ctx, small)
    world.scheduler.run_once()  # the requeued job runs again
    world.executor.write_log(big, "epoch 3\n")
    got = world.get("admin", f"/workloads/{big}/logs").json()
    assert got["state"] == "running" and got["runs"] == 2
    first, sep, rest = got["text"].partition("--- requeued after preemption at ")
    assert first == "epoch 1\nepoch 2\n" and sep
    assert "; run 2 starts at " in rest and rest.endswith("---\nepoch 3\n")
    assert "this is run 2" in got["note"]


def test_preempted_work_whose_engine_lost_the_earlier_output_gets_an_empty_log(world):
    big, _ = _preempted(world)

    def gone(*a, **k):
        raise ExecutorError("pod lab/w-1 is gone")

    world.executor.log_chunks = gone  # type: ignore[method-assign]
    got = world.get("admin", f"/workloads/{big}/logs").json()
    assert got["text"] == "" and "cannot be read: pod lab/w-1 is gone" in got["note"]
