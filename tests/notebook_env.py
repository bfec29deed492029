"""A Python environment with jupyterhub-singleuser and JupyterLab that any account can run.

gpupool's engines run notebooks as their owners' accounts (never root), and those accounts
cannot read this machine's own Python when it lives under /root (pyenv). The tests that run
real notebook servers therefore use a virtual environment of the system Python, made once
under /tmp with the same JupyterHub and JupyterLab as the tests' own (world-readable);
``GPUPOOL_TEST_NOTEBOOK_VENV`` names another. `singleuser()` is its jupyterhub-singleuser,
or None (with why) when it cannot be had: the tests then skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import jupyterhub

try:
    import jupyterlab

    LAB = jupyterlab.__version__
except ImportError:  # pragma: no cover - the dev extras install it
    LAB = None


def default_venv() -> Path:
    return Path(f"/tmp/gpupool-nbenv-jh{jupyterhub.__version__}-lab{LAB}")


def singleuser() -> tuple[Path | None, str]:
    """(path of jupyterhub-singleuser, "") or (None, why not)."""
    given = os.environ.get("GPUPOOL_TEST_NOTEBOOK_VENV")
    venv = Path(given) if given else default_venv()
    exe = venv / "bin" / "jupyterhub-singleuser"
    if exe.exists():
        return exe, ""
    if given:
        return None, f"{exe} is missing"
    python = shutil.which("python3", path="/usr/bin:/usr/local/bin")
    if python is None:
        return None, "no system python3 to make the notebooks' environment from"
    wants = [f"jupyterhub=={jupyterhub.__version__}", "jupyter_server"]
    wants += [f"jupyterlab=={LAB}"] if LAB else []
    try:
        subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
        subprocess.run(
            [str(venv / "bin" / "pip"), "install", "-q", *wants],
            check=True, timeout=900, capture_output=True,
        )  # fmt: skip
        subprocess.run(["chmod", "-R", "a+rX", str(venv)], check=True)
    except (subprocess.SubprocessError, OSError) as e:
        shutil.rmtree(venv, ignore_errors=True)
        return None, f"could not make the notebooks' Python environment: {e}"
    return exe, ""
