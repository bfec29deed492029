"""One intake pass (services.external.submitter: the watch queueing kubectl-applied work)
reads the nodes once for all its submissions, checks each exactly as a submission on its
own is checked, and the next pass reads them again (issue 33)."""

from __future__ import annotations

import pytest

from gpupool.domain import GPU, Node, ValidationError
from gpupool.engines.common.engine import ExternalWork
from gpupool.server.services.external import submit_external, submitter
from gpupool.store import NodeRepo, WorkloadRepo


@pytest.fixture
def node_reads(monkeypatch) -> list[int]:
    """How many times the store's nodes were read (NodeRepo.list), wrapped."""
    calls: list[int] = []
    inner = NodeRepo.list

    def counted(self: NodeRepo) -> list[Node]:
        calls.append(1)
        return inner(self)

    monkeypatch.setattr(NodeRepo, "list", counted)
    return calls


def _work(i: int, **ask) -> ExternalWork:
    return ExternalWork(
        tenant="lab", user="ann", engine="fake", name=f"p-{i}", command=(f"Pod/ns/p-{i}",), **ask
    )


def _refusal(submit, work: ExternalWork) -> str:  # noqa: ANN001
    with pytest.raises(ValidationError) as e:
        submit(work)
    return str(e.value)


def test_a_pass_reads_the_nodes_once_and_decides_as_one_by_one(world, node_reads):
    asks = [{"gpus": 1}, {"gpus": 2, "cpus": 4.0}, {"gpus": 1, "gpu_model": "H100"}]
    alone = [submit_external(world.ctx, _work(i, **a)) for i, a in enumerate(asks)]
    refused_alone = _refusal(lambda w: submit_external(world.ctx, w), _work(9, gpus=9))
    assert len(node_reads) == len(asks) + 1  # before: every submission reads every node

    node_reads.clear()
    submit = submitter(world.ctx)
    shared = [submit(_work(10 + i, **a)) for i, a in enumerate(asks)]
    refused_shared = _refusal(submit, _work(19, gpus=9))
    assert len(node_reads) == 1
    assert refused_shared == refused_alone
    assert "can never run: needs 9 GPUs on one node" in refused_shared
    with world.ctx.store.read() as s:
        repo = WorkloadRepo(s)
        made = [repo.get(a.workload_id) for a in alone + shared]
    assert [a.owner for a in alone] == [a.owner for a in shared] == ["ann"] * len(asks)
    assert [w.request for w in made[: len(asks)]] == [w.request for w in made[len(asks) :]]


def test_a_node_added_after_a_pass_is_seen_by_the_next(world, node_reads):
    first = submitter(world.ctx)
    why = _refusal(first, _work(0, gpus=1, gpu_model="A100"))
    assert "can never run" in why
    with world.ctx.store.write() as s:
        NodeRepo(s).upsert(
            Node("n2", tuple(GPU(i, f"GPU-n2-{i}", "A100", 40960) for i in range(2)), 32000, 1024)
        )
    assert _refusal(first, _work(1, gpus=1, gpu_model="A100")) == why  # its pass's nodes
    answer = submitter(world.ctx)(_work(2, gpus=1, gpu_model="A100"))
    assert answer.owner == "ann"
    assert len(node_reads) == 2  # once per pass
