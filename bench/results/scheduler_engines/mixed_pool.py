"""Ad hoc (issue 31): scheduler cycle times on a mixed pool, by bench/scheduler_scale.py's
workload: plain nodes; every node labelled by one of three engines (slurm and kubernetes
multi-node); and 30% of the work pinned to one engine. Best of 3 runs each.

    PYTHONPATH=src python3 bench/results/scheduler_engines/mixed_pool.py NODES PENDING
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

sys.path.insert(0, "bench")
import scheduler_scale as b  # noqa: E402

from gpupool.domain.placement import ENGINE_LABEL, MULTI_NODE_LABEL  # noqa: E402

ENGINES = ["local", "slurm", "kubernetes"]
plain_nodes, plain_make = b.build_nodes, b.Workgen.make


def labelled_nodes(count, gpus):
    out = []
    for i, n in enumerate(plain_nodes(count, gpus)):
        e = ENGINES[i % 3]
        labels = {ENGINE_LABEL: e, **({MULTI_NODE_LABEL: "true"} if e != "local" else {})}
        out.append(dataclasses.replace(n, labels=tuple(sorted(labels.items()))))
    return out


def make_pinned(self, now):
    w, d = plain_make(self, now)
    if self.rng.random() < 0.3:
        r = dataclasses.replace(w.request, engine=self.rng.choice(ENGINES))
        w = dataclasses.replace(w, request=r)
    return w, d


def main() -> None:
    args = argparse.Namespace(
        nodes=int(sys.argv[1]),
        gpus_per_node=8,
        pending=int(sys.argv[2]),
        tenants=50,
        cycles=12,
        step=300.0,
        policy="fair",
        seed=1,
        no_cache=False,
        profile=None,
        digest=False,
        worker=False,
    )
    for label, nodes, make in (
        ("plain nodes, no pins", plain_nodes, plain_make),
        ("3 engines, no pins", labelled_nodes, plain_make),
        ("3 engines, 30% pinned", labelled_nodes, make_pinned),
    ):
        b.build_nodes, b.Workgen.make = nodes, make
        runs = [b.run(args) for _ in range(3)]
        best = min(runs, key=lambda r: r["p50_cycle_cpu_ms"])
        print(
            f"{label:24s} p50 {best['p50_cycle_cpu_ms']:7.1f} ms  "
            f"p99 {best['p99_cycle_cpu_ms']:7.1f} ms  cold {best['cold_cycle_ms']:7.1f} ms  "
            f"admissions {best['admissions']}"
        )


if __name__ == "__main__":
    main()
