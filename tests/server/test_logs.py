"""GET /workloads/{id}/logs (review F6): the whole log streamed as the same JSON object as
before, `?tail=` from the end with long lines cut, `?offset=` pages that never split a
character."""

from __future__ import annotations

from gpupool.executors import logread

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
    assert r.json() == {"workload_id": wid, "state": "running", "text": LOG}


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
