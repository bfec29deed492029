"""PendingInfos: a cycle's reasons, with runs of a queue built on first read."""

from __future__ import annotations

from types import SimpleNamespace

from gpupool.scheduler.types import PendingInfo, PendingInfos


def _queue(*ids_shapes: tuple[str, str]) -> list[tuple]:
    return [
        ((i,), SimpleNamespace(id=wid), shape, 1000) for i, (wid, shape) in enumerate(ids_shapes)
    ]


def test_runs_read_as_if_each_entry_had_been_built() -> None:
    q = _queue(("a", "s1"), ("b", "s2"), ("c", "s1"), ("d", "s2"))
    infos = PendingInfos()
    infos.put("a", PendingInfo("at its limit", 1, 2))
    memo = {"s1": "no GPU free", "s2": "no shared GPU free"}
    infos.add_run(q, 1, memo, 2, 2, stop=3)  # b, c: the reason of their shape
    infos.add_run(q, 3, "waiting for the next cycle", 4, 2)  # d
    assert len(infos) == 4
    assert dict(infos) == {
        "a": PendingInfo("at its limit", 1, 2),
        "b": PendingInfo("no shared GPU free", 2, 2),
        "c": PendingInfo("no GPU free", 3, 2),
        "d": PendingInfo("waiting for the next cycle", 4, 2),
    }
    assert len(infos) == 4 and "d" in infos and "e" not in infos


def test_text_added_to_a_reason_before_and_after_the_runs_are_built() -> None:
    q = _queue(("a", "s"), ("b", "s"))
    infos = PendingInfos()
    infos.put("x", PendingInfo("why", 1, 1))
    infos.add_run(q, 0, "full", 1, 2)
    infos.add_to_reason("x", "; requeued")
    infos.add_to_reason("b", "; requeued")
    infos.add_to_reason("gone", "; requeued")  # no entry: nothing
    assert infos["x"] == PendingInfo("why; requeued", 1, 1)
    assert infos["b"] == PendingInfo("full; requeued", 2, 2)
    assert "gone" not in infos
    infos.add_to_reason("a", "!")  # built by now
    assert infos["a"].reason == "full!"
    infos["a"] = PendingInfo("other", 1, 2)
    assert infos == {
        "x": PendingInfo("why; requeued", 1, 1),
        "a": PendingInfo("other", 1, 2),
        "b": PendingInfo("full; requeued", 2, 2),
    }


def test_views_read_the_built_entries_without_a_call_per_entry() -> None:
    q = _queue(("a", "s"), ("b", "s"), ("c", "s"))
    infos = PendingInfos()
    infos.put("x", PendingInfo("why", 1, 1))
    infos.add_run(q, 1, "full", 2, 3)  # b, c: not built until read
    infos.add_to_reason("c", "; requeued")
    expected = {
        "x": PendingInfo("why", 1, 1),
        "b": PendingInfo("full", 2, 3),
        "c": PendingInfo("full; requeued", 3, 3),
    }
    # items/keys/values are the views of one dict (as the server loop reads every entry)
    assert type(infos.items()) is type({}.items())
    assert dict(infos.items()) == expected
    keys = infos.keys()
    assert list(keys) == ["x", "b", "c"] and "c" in keys and "gone" not in keys
    assert list(infos.values()) == list(expected.values())
    # the same entries as reading key by key; later writes show in the views
    assert {k: infos[k] for k in infos} == expected
    infos["b"] = PendingInfo("admitted elsewhere", 2, 3)
    del infos["x"]
    assert dict(infos.items()) == {
        "b": PendingInfo("admitted elsewhere", 2, 3),
        "c": PendingInfo("full; requeued", 3, 3),
    }
