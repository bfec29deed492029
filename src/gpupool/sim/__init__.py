"""Replays scenarios and traces through the scheduler on a virtual clock.

`load_scenario(path)` / `trace_scenario(jobs, ...)` build a Scenario; `simulate(scenario)`
replays it; `to_json(result)` gives what `gpupool simulate --json` prints. See
docs/scenarios.md.
"""

from gpupool.sim.engine import SimulationError, simulate
from gpupool.sim.metrics import compute_metrics, to_json
from gpupool.sim.result import SimResult
from gpupool.sim.scenario import Scenario, ScenarioError, load_scenario, parse_scenario

__all__ = [
    "Scenario",
    "ScenarioError",
    "SimResult",
    "SimulationError",
    "compute_metrics",
    "load_scenario",
    "parse_scenario",
    "simulate",
    "to_json",
]
