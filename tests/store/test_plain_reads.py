"""The reads that go past the ORM (plain rows: `NodeRepo.rows`/`list`, `pending_rows`,
`running_rows`) flush first, as a Session query would: in a write session they see its
changes not yet flushed (SQLite and PostgreSQL)."""

from __future__ import annotations

from gpupool.domain import GPU, Node, NodeState, Quota, Request, Tenant, User, Workload
from gpupool.store import NodeRepo, TenantRepo, UserRepo, WorkloadRepo
from gpupool.store.rows import NodeRow, WorkloadRow


def test_plain_reads_see_the_sessions_unflushed_changes(store):
    gpus = (GPU(0, "GPU-0", "H100", 81920),)
    with store.write() as s:
        TenantRepo(s).save(Tenant("lab", Quota.gpus(1, 2)), 0.0)
        UserRepo(s).create(User("ann"), None, 0.0)
        NodeRepo(s).upsert(Node("n1", gpus, cpu_milli=8000, memory_mib=64000))
        WorkloadRepo(s).add(Workload("w1", "lab", "ann", Request(gpus=1), command=("x",)))
    with store.write() as s:
        n, w = s.get(NodeRow, "n1"), s.get(WorkloadRow, "w1")
        n.state, w.priority = str(NodeState.DRAINING), 9  # not flushed
        assert [n.state for n in NodeRepo(s).list()] == [NodeState.DRAINING]
        assert [w.priority for w in WorkloadRepo(s).pending()] == [9]
