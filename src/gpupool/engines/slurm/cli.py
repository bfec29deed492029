"""Slurm's client commands, run as subprocesses: the only place gpupool talks to Slurm.

`SlurmCLI` runs ``sinfo``, ``squeue``, ``sacct`` (with ``--json``: Slurm 22.05 and later),
``sbatch``, ``scancel``, ``scontrol`` and ``sacctmgr -i``. Every call has a timeout; a failing
call raises `SlurmError` with the command's own message. The JSON readers accept both the
22.05 shapes (``exit_code`` as an object, states as strings) and later ones (states as lists,
numbers as ``{"set", "number"}`` objects).
``scontrol`` has no ``--json`` before 23.02, so nodes are read with ``sinfo --json`` always.

Each command runs with the server's own fixed environment, never a workload's (security
review F1): the program is resolved once, by absolute path, from the server's own ``PATH``;
its environment is only ``PATH`` (the program's directory, then `SAFE_PATH`) and the
server's ``SLURM_CONF`` when one is set. So nothing a workload declares (``PATH``,
``LD_PRELOAD``, ``SBATCH_*``, ``SLURM_CONF``) can choose the program, load code into it or
set a Slurm option gpupool did not give; nor does any other variable of the server's
(``SBATCH_*`` an admin's shell happened to have) reach Slurm. A job's own variables travel
inside its batch script (`jobscript`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpupool.engines.common.executor import ExecutorError

Runner = Callable[..., subprocess.CompletedProcess[str]]

#: Directories after the program's own on the ``PATH`` a Slurm command runs with.
SAFE_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")


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


def exit_code_of(record: Mapping[str, Any]) -> int | None:
    """The shell's exit code from a sacct (object) or squeue (number) record; 128+N when
    killed by signal N."""
    ec = record.get("exit_code")
    if isinstance(ec, dict):
        sig = ec.get("signal") or {}
        sig_id = number(sig.get("signal_id") if isinstance(sig, dict) else None)
        status = ec.get("status")
        statuses = {str(s).upper() for s in (status if isinstance(status, list) else [status])}
        if "SIGNALED" in statuses and sig_id:
            return 128 + sig_id
        return number(ec.get("return_code"))
    code = number(ec)
    if code is None:
        return None
    if code & 0x7F:  # squeue gives the wait status: killed by a signal
        return 128 + (code & 0x7F)
    return code >> 8


def gres_parts(gres: str) -> list[str]:
    """A GRES string's parts, split at the commas outside parentheses
    (``gpu:a100:2(S:0-1),shard:8`` → [``gpu:a100:2(S:0-1)``, ``shard:8``]; ``(null)`` → [])."""
    parts, depth, cur = [], 0, ""
    for ch in gres or "":
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    return [p for p in [*parts, cur] if p and p != "(null)"]


def epoch(value: Any) -> float | None:
    """A Slurm time (epoch seconds; 0 or unset: not yet) as a float, else None."""
    t = number(value)
    return float(t) if t else None


class SlurmCLI:
    """Runs Slurm's commands. `conf`: a slurm.conf path (default: $SLURM_CONF or Slurm's
    own default); `runner`: `subprocess.run` or a stand-in (the benchmark's, the tests'),
    which is given the bare program name and decides itself what runs; `search_path`: where
    programs are looked up (default: this process's ``PATH``, read at the first call)."""

    def __init__(
        self,
        conf: str | None = None,
        *,
        timeout_s: float = 30.0,
        runner: Runner = subprocess.run,
        search_path: str | None = None,
    ) -> None:
        self.conf = conf or os.environ.get("SLURM_CONF")
        self.timeout_s = timeout_s
        self.runner = runner
        self.search_path = search_path
        self._programs: dict[str, str] = {}
        self._version: tuple[int, int] | None = None

    def program(self, name: str) -> str:
        """The absolute path of Slurm command `name` (resolved once from the server's own
        PATH); the bare name for a stand-in runner. `SlurmError` when it is not installed."""
        if self.runner is not subprocess.run:
            return name
        found = self._programs.get(name)
        if found is None:
            where = shutil.which(name, path=self.search_path or os.environ.get("PATH", ""))
            if where is None:
                raise SlurmError(
                    f"{name} is not installed or not on PATH: install Slurm's client commands "
                    "(Debian: apt-get install slurm-client) on the gpupool host"
                )
            found = self._programs[name] = os.path.abspath(where)
        return found

    def env(self, program: str) -> dict[str, str]:
        """The whole environment of a Slurm command (see the module docstring)."""
        directory = os.path.dirname(program)
        path = [directory] if directory and directory not in SAFE_PATH else []
        env = {"PATH": os.pathsep.join([*path, *SAFE_PATH])}
        if self.conf:
            env["SLURM_CONF"] = self.conf
        return env

    def run(self, args: Sequence[str], *, stdin: str | None = None, cwd: str | None = None) -> str:
        """Run one command; its stdout, or `SlurmError` with its stderr."""
        program = self.program(args[0])
        try:
            done = self.runner(
                [program, *args[1:]],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=self.env(program),
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

    def config(self) -> dict[str, str]:
        """`scontrol show config` as name -> value (slurm.conf's and, where the cluster has
        one, cgroup.conf's settings, as slurmctld has them)."""
        out = self.run(["scontrol", "show", "config"])
        pairs = (line.split("=", 1) for line in out.splitlines() if "=" in line)
        return {k.strip(): v.strip() for k, v in pairs if k.strip() and " " not in k.strip()}

    def accounting(self, job_ids: Sequence[str]) -> list[dict[str, Any]]:
        """`sacct --json`'s records of these jobs (allocations only, no steps)."""
        if not job_ids:
            return []
        args = ["sacct", "-X", "--allusers", "-j", ",".join(job_ids)]
        return list(self.json(args).get("jobs", []))

    # -- writes -----------------------------------------------------------------------
    def sbatch(self, args: Sequence[str], script: str, cwd: str | None = None) -> str:
        """Submit `script` (on stdin) with `args`; the job id. The job's variables are in
        the script: sbatch itself runs with the server's fixed environment."""
        out = self.run(["sbatch", "--parsable", *args], stdin=script, cwd=cwd)
        job_id = out.strip().split(";")[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch answered {out.strip()!r}, not a job id")
        return job_id

    def scancel(self, job_id: str, signal: str | None = None) -> None:
        """Signal every process of the job (``--signal=<signal> --full``): slurmd delivers it
        to what runs now and drops it for a job whose batch script has not started yet. With
        no `signal`: cancel the job (slurmctld records it; a job not started never starts)."""
        args = ["scancel"]
        if signal:
            args += [f"--signal={signal}", "--full"]
        self.run([*args, job_id])

    def set_comment(self, job_id: str, comment: str) -> None:
        """``scontrol update JobId=<job_id> Comment=<comment>`` (kept by slurmctld)."""
        self.run(["scontrol", "update", f"JobId={job_id}", f"Comment={comment}"])

    def sacctmgr(self, *args: str) -> str:
        """`sacctmgr -i` (no questions) with `args`."""
        return self.run(["sacctmgr", "-i", *args])

    def sacctmgr_list(self, *args: str) -> list[list[str]]:
        """`sacctmgr -n -P list …`: rows split on '|'."""
        out = self.run(["sacctmgr", "-n", "-P", "list", *args])
        return [line.split("|") for line in out.splitlines() if line.strip()]
