"""Log the scale of relative levels (km95) over one replay: each move (replay hours, GPU-s).

    PYTHONPATH=src python3 bench/results/burst/session16/ladder_log.py philly 2017-10-02 0.8
    PYTHONPATH=src python3 bench/results/burst/session16/ladder_log.py burst 1 1.2
(needs session16/km_levels.diff applied)."""

import dataclasses
import sys

sys.path.insert(0, "bench")
from trace_compare import scope_jobs  # noqa: E402

import gpupool.sim.relative as rel  # noqa: E402
from gpupool.scheduler.types import Policy  # noqa: E402
from gpupool.sim.burst import burst_jobs  # noqa: E402
from gpupool.sim.engine import simulate  # noqa: E402
from gpupool.sim.trace import trace_scenario  # noqa: E402

WINDOW = 64  # trace_compare.py --window default
kind, which, load = sys.argv[1], sys.argv[2], float(sys.argv[3])
if kind == "burst":
    jobs = burst_jobs(int(which))
else:
    jobs = scope_jobs("/work/shared/data/philly/philly.csv", f"w{which}")
scen = trace_scenario(jobs, policy=Policy.FAIR, load=load, checkpointing=True)
scen.min_cycle_gap_s = 60.0  # as trace_compare.py and burst_sweep.py
scen.pending_window = WINDOW if kind == "philly" else scen.pending_window
scen.config = dataclasses.replace(scen.config, service_levels_relative=(0.07, 0.7, 7.0))
orig = rel.RelativeLevels.update


def update(self, records, running, t):
    moved = orig(self, records, running, t)
    if moved:
        print(f"{t / 3600:.2f} h: scale {self.scale.scale:.0f} GPU-s", flush=True)
    return moved


rel.RelativeLevels.update = update
r = simulate(scen)
print(f"{kind} {which} {load}: {sum(1 for _ in r.records)} jobs")
