"""Slurm's client commands, run as subprocesses: the only place gpupool talks to Slurm.

`SlurmCLI` runs ``sinfo``, ``squeue``, ``sacct`` (with ``--json``: Slurm 22.05 and later),
``sbatch``, ``scancel`` and ``sacctmgr -i`` with the environment's ``SLURM_CONF`` (or the one
given). Every call has a timeout; a failing call raises `SlurmError` with the command's own
message. The JSON readers accept both the 22.05 shapes (``exit_code`` as an object, states as
strings) and later ones (states as lists, numbers as ``{"set", "number"}`` objects).
``scontrol`` has no ``--json`` before 23.02, so nodes are read with ``sinfo --json`` always.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpupool.executors.base import ExecutorError

Runner = Callable[..., subprocess.CompletedProcess[str]]


class SlurmError(ExecutorError):
    """A Slurm command failed or is missing; the message has Slurm's own words."""


def number(value: Any) -> int | None:
    """A Slurm JSON number: a plain int (22.05) or ``{"set": bool, "number": int}`` (23+)."""
    if isinstance(value, dict):
        return int(value["number"]) if value.get("set", True) and "number" in value else None
    if isinstance(value, bool) or value is None:
        return None
    return int(value)


def state_of(value: Any) -> str:
    """A job or node state: a string (22.05) or a list of flags (23+), upper case."""
    if isinstance(value, list):
        return str(value[0]).upper() if value else ""
    return str(value or "").upper()


class SlurmCLI:
    """Runs Slurm's commands. `conf`: a slurm.conf path (default: $SLURM_CONF or Slurm's
    own default); `runner`: `subprocess.run` or a stand-in (the benchmark's)."""

    def __init__(
        self,
        conf: str | None = None,
        *,
        timeout_s: float = 30.0,
        runner: Runner = subprocess.run,
    ) -> None:
        self.conf = conf or os.environ.get("SLURM_CONF")
        self.timeout_s = timeout_s
        self.runner = runner
        self._version: tuple[int, int] | None = None

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a Slurm command: `extra` (or this process's), with SLURM_CONF."""
        env = dict(os.environ if extra is None else extra)
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def run(
        self,
        args: Sequence[str],
        *,
        stdin: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> str:
        """Run one command; its stdout, or `SlurmError` with its stderr."""
        if self.runner is subprocess.run and shutil.which(args[0]) is None:
            raise SlurmError(
                f"{args[0]} is not installed or not on PATH: install Slurm's client commands "
                "(Debian: apt-get install slurm-client) on the gpupool host"
            )
        try:
            done = self.runner(
                list(args),
                input=stdin,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=self.env(env),
                cwd=cwd,
            )
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{args[0]} did not answer within {self.timeout_s:g} s") from None
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip() or f"exit code {done.returncode}"
            raise SlurmError(f"{' '.join(args[:2])}: {why}")
        return done.stdout

    def json(self, args: Sequence[str]) -> dict[str, Any]:
        out = self.run([*args, "--json"])
        try:
            data = json.loads(out)
        except ValueError:
            raise SlurmError(f"{args[0]} --json gave no JSON (Slurm older than 21.08?)") from None
        errors = [e for e in data.get("errors", []) if e]
        if errors:
            raise SlurmError(f"{args[0]}: {errors}")
        return dict(data)

    def version(self) -> tuple[int, int]:
        """(major, minor) of the installed Slurm, e.g. (22, 5)."""
        if self._version is None:
            out = self.run(["sinfo", "--version"])
            m = re.search(r"(\d+)\.(\d+)", out)
            if m is None:
                raise SlurmError(f"sinfo --version said {out.strip()!r}")
            self._version = (int(m.group(1)), int(m.group(2)))
        return self._version

    # -- reads ------------------------------------------------------------------------
    def nodes(self) -> list[dict[str, Any]]:
        """`sinfo --json`'s nodes."""
        return list(self.json(["sinfo"]).get("nodes", []))

    def jobs(self) -> list[dict[str, Any]]:
        """`squeue --json`'s jobs (every user's; recently ended ones included)."""
        return list(self.json(["squeue", "--all"]).get("jobs", []))

    def accounting(self, job_ids: Sequence[str]) -> list[dict[str, Any]]:
        """`sacct --json`'s records of these jobs (allocations only, no steps)."""
        if not job_ids:
            return []
        args = ["sacct", "-X", "--allusers", "-j", ",".join(job_ids)]
        return list(self.json(args).get("jobs", []))

    # -- writes -----------------------------------------------------------------------
    def sbatch(
        self, args: Sequence[str], script: str, env: Mapping[str, str], cwd: str | None = None
    ) -> str:
        """Submit `script` with `args`; the job id."""
        out = self.run(["sbatch", "--parsable", *args], stdin=script, env=env, cwd=cwd)
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch answered {out.strip()!r}, not a job id")
        return job_id

    def scancel(self, job_id: str, signal: str | None = None) -> None:
        args = ["scancel"]
        if signal:
            args += [f"--signal={signal}", "--full"]
        self.run([*args, job_id])

    def sacctmgr(self, *args: str) -> str:
        """`sacctmgr -i` (no questions) with `args`."""
        return self.run(["sacctmgr", "-i", *args])

    def sacctmgr_list(self, *args: str) -> list[list[str]]:
        """`sacctmgr -n -P list …`: rows split on '|'."""
        out = self.run(["sacctmgr", "-n", "-P", "list", *args])
        return [line.split("|") for line in out.splitlines() if line.strip()]
