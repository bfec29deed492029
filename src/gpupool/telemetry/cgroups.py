"""Which Slurm job or Kubernetes pod a process belongs to, from its cgroup and environment.

Pure parsing (no I/O): the callers read `/proc/<pid>/cgroup` and `/proc/<pid>/environ`
and pass the text here. Every layout in use is understood:

- cgroup v1 (`ID:controllers:/path`, one line per hierarchy) and v2 (`0::/path`);
- Kubernetes with the `cgroupfs` driver (`/kubepods/burstable/pod<uid>/<container>`) and with
  the `systemd` driver (`/kubepods.slice/kubepods-burstable.slice/
  kubepods-burstable-pod<uid with _>.slice/cri-containerd-<id>.scope`);
- Slurm's cgroup plugins: v1 (`/slurm/uid_1000/job_42/step_0/task_0`, or `/slurm_<node>/...`
  with several slurmd on one host) and v2 (`/system.slice/slurmstepd.scope/job_42/step_0/...`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
#: `pod<uid>` as a path element (cgroupfs) or inside a systemd slice name
_POD = re.compile(rf"(?:^|[/-])pod({_UID})(?:\.slice)?(?:/|$)", re.IGNORECASE)
#: `job_<id>` below a Slurm cgroup root (`slurm`, `slurm_<node>`, `slurmstepd.scope`)
_SLURM_JOB = re.compile(r"/slurm[^/]*(?:/[^/]+)*?/job_(\d+)(?:/|$)")
_JOB_ENV = ("SLURM_JOB_ID", "SLURM_JOBID")


@dataclass(frozen=True, slots=True)
class CgroupLine:
    """One line of `/proc/<pid>/cgroup`: hierarchy id, controllers (empty on v2), path."""

    hierarchy: int
    controllers: tuple[str, ...]
    path: str

    @property
    def unified(self) -> bool:
        """True for the cgroup v2 (unified) hierarchy."""
        return self.hierarchy == 0 and not self.controllers


def parse_cgroup(text: str) -> list[CgroupLine]:
    """The lines of a `/proc/<pid>/cgroup` file; malformed lines are skipped."""
    out: list[CgroupLine] = []
    for raw in text.splitlines():
        parts = raw.strip().split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            continue
        controllers = tuple(c for c in parts[1].split(",") if c)
        out.append(CgroupLine(int(parts[0]), controllers, parts[2]))
    return out


def pod_uid_from_cgroup(text: str) -> str | None:
    """The Kubernetes pod UID (lower case, with dashes) a process's cgroups name, if any."""
    for line in parse_cgroup(text):
        m = _POD.search(line.path)
        if m:
            return m.group(1).lower().replace("_", "-")
    return None


def slurm_job_from_cgroup(text: str) -> str | None:
    """The Slurm job id a process's cgroups name (`.../job_<id>/...`), if any."""
    for line in parse_cgroup(text):
        m = _SLURM_JOB.search(line.path)
        if m:
            return m.group(1)
    return None


def slurm_job_from_environ(env: Mapping[str, str]) -> str | None:
    """The Slurm job id from a process environment (`SLURM_JOB_ID`, older `SLURM_JOBID`)."""
    for key in _JOB_ENV:
        value = env.get(key, "").strip()
        if value.isdigit():
            return value
    return None
