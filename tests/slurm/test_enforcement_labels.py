"""Whole GPUs on Slurm are labelled by what holds there (docs/security.md, Enforcement
labels): `hardware` where Slurm's cgroups deny a job the node's other GPUs, else `none`:
nothing polices them on Slurm (never `policed`). Read from `scontrol show config`."""

from __future__ import annotations

import json
import subprocess

import pytest

from gpupool.clock import ManualClock
from gpupool.domain import Enforcement
from gpupool.engines.common.engine import EngineEnv
from gpupool.engines.slurm.cli import SlurmCLI
from gpupool.engines.slurm.engine import SlurmEngine, SlurmOptions
from tests.slurm.test_executor_logic import start

#: `scontrol show config` of Slurm 22.05 (abridged), with cgroup.conf's section
CONFIG = """Configuration data as of 2026-11-28T06:00:00
AccountingStorageType   = accounting_storage/slurmdbd
ProctrackType           = proctrack/cgroup
TaskPlugin              = {task}
TaskPluginParam         = (null type)

Cgroup Support Configuration:
CgroupAutomount         = yes
ConstrainCores          = yes
ConstrainDevices        = {devices}
ConstrainRAMSpace       = yes
Slurmctld(primary) at ctl is UP
"""


def _engine(output_dir, config: str | None) -> SlurmEngine:  # noqa: ANN001
    def runner(args, **kw):  # noqa: ANN001, ANN003, ANN202
        if args[0] == "scontrol" and args[1:3] == ["show", "config"]:
            if config is None:
                return subprocess.CompletedProcess(args, 1, "", "Unable to contact slurm")
            return subprocess.CompletedProcess(args, 0, config, "")
        out = {"sinfo": json.dumps({"nodes": []}), "squeue": json.dumps({"jobs": []})}
        out["sbatch"] = "101\n"
        text = "slurm 22.05.8" if "--version" in args else out.get(args[0], "")
        return subprocess.CompletedProcess(args, 0, text, "")

    opts = SlurmOptions(output_dir=output_dir, per_user=False)
    return SlurmEngine(opts, cli=SlurmCLI(runner=runner))


@pytest.mark.parametrize(
    ("task", "devices", "label"),
    [
        ("task/cgroup,task/affinity", "yes", Enforcement.HARDWARE),
        ("task/cgroup", "no", Enforcement.NONE),  # cgroups, but devices not constrained
        ("task/affinity", "yes", Enforcement.NONE),  # cgroup.conf says so; no plugin applies it
        ("task/none", "no", Enforcement.NONE),
    ],
)
def test_whole_gpus_are_hardware_only_where_slurms_cgroups_constrain_devices(
    output_dir, task, devices, label
):
    engine = _engine(output_dir, CONFIG.format(task=task, devices=devices))
    ex = engine.open(EngineEnv(ManualClock(0.0)))
    start(ex, "w-1", gpus=2)
    assert ex.enforcement_of("w-1") == {"slurm-n1-gpu0": label, "slurm-n1-gpu1": label}
    assert Enforcement.POLICED not in ex.enforcement_of("w-1").values()


def test_an_unreadable_config_claims_nothing(output_dir):
    ex = _engine(output_dir, None).open(EngineEnv(ManualClock(0.0)))
    start(ex, "w-1", gpus=1)
    assert ex.enforcement_of("w-1") == {"slurm-n1-gpu0": Enforcement.NONE}
