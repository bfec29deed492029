"""Which variables a workload may declare (`domain.commands.check_declared_env`): none that
gpupool sets itself, none that steer the dynamic loader or Slurm (security review F1); the
refusal names the variable and says what to do instead."""

from __future__ import annotations

import pytest

from gpupool.domain import ValidationError
from gpupool.domain.commands import (
    RESERVED_ENV_NAMES,
    RESERVED_ENV_PREFIXES,
    check_declared_env,
)

LOADER = ["LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_DEBUG", "GLIBC_TUNABLES"]
SLURM = [
    "SBATCH_ARRAY_INX",
    "SBATCH_GRES",
    "SBATCH_EXCLUSIVE",
    "SBATCH_WAIT",
    "SBATCH_QOS",
    "SLURM_CONF",
    "SLURM_JOB_ID",
    "SALLOC_GRES",
    "SRUN_CPUS_PER_TASK",
]


@pytest.mark.parametrize("name", LOADER)
def test_loader_variables_are_refused_saying_to_set_them_in_the_command(name):
    with pytest.raises(ValidationError) as e:
        check_declared_env({"OK": "1", name: "/tmp/x.so"})
    assert repr(name) in str(e.value) and "dynamic loader" in str(e.value)
    assert "inside the command" in str(e.value)


@pytest.mark.parametrize("name", SLURM)
def test_slurm_variables_are_refused_saying_what_to_ask_for(name):
    with pytest.raises(ValidationError) as e:
        check_declared_env({name: "1"})
    assert repr(name) in str(e.value) and "steers Slurm" in str(e.value)
    assert "gpus" in str(e.value)


def test_gpu_binding_stays_refused_with_its_own_reason():
    with pytest.raises(ValidationError, match="bind the GPUs"):
        check_declared_env({"CUDA_VISIBLE_DEVICES": "0"})


@pytest.mark.parametrize(
    "name", ["PATH", "PYTHONPATH", "HOME", "LANG", "CUDA_HOME", "MY_LD_FLAGS", "SLURMY", "OMP_X"]
)
def test_ordinary_variables_pass(name):
    check_declared_env({name: "x"})


@pytest.mark.parametrize("name", LOADER + SLURM + ["CUDA_VISIBLE_DEVICES", "GPUPOOL_X"])
def test_the_hub_spawners_drop_every_refused_name(name):
    """The spawners filter their own environment with these constants before submitting."""
    assert name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIXES)
