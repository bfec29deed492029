"""`ChargebackRepo.used_gpu_seconds` (what a budget has used): the tenant's subtree only, the
days of the period only, and on one GPU model when the budget names one."""

from __future__ import annotations

from gpupool.store import UsageRepo
from gpupool.store.chargeback import UNKNOWN_MODEL, ChargebackRepo


def test_used_gpu_seconds_keeps_to_subtree_days_and_model(store):
    with store.write() as s:
        usage = UsageRepo(s)
        for wid, tenant, day, secs in (
            ("w1", "lab", "2026-05-01", 100.0),
            ("w2", "lab/a", "2026-05-31", 20.0),
            ("w3", "lab2", "2026-05-10", 4000.0),  # a name that starts alike: not below lab
            ("w4", "lab", "2026-04-30", 8000.0),  # before the period
            ("w5", "lab/a", "2026-06-01", 9000.0),  # after it
        ):
            usage.add(workload_id=wid, tenant=tenant, user="u", day=day, gpu_seconds_allocated=secs)
    with store.read() as s:
        repo = ChargebackRepo(s)
        assert repo.used_gpu_seconds("lab", "2026-05-01", "2026-05-31") == 120.0
        # no workload rows: their usage counts on the unknown model, none on H100
        assert repo.used_gpu_seconds("lab", "2026-05-01", "2026-05-31", UNKNOWN_MODEL) == 120.0
        assert repo.used_gpu_seconds("lab", "2026-05-01", "2026-05-31", "H100") == 0.0
        assert repo.used_gpu_seconds("lab/a", "2026-05-01", "2026-06-30", UNKNOWN_MODEL) == 9020.0
