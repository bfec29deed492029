"""GPU process -> workload -> user and tenant.

gpupool's own services come first: an ``nvidia-cuda-mps-server`` whose parent is the MPS
control daemon gpupool runs for a GPU (`mps_daemons`: daemon pid -> GPU UUID) is that GPU's
MPS server (`Via.SERVICE`), not an unowned process: policing leaves it alone on that GPU.

Then three ways, first match wins:
1. `GPUPOOL_WORKLOAD_ID` in `/proc/<pid>/environ`, following parent processes
   (`/proc/<pid>/stat` field 4) up to init, so a child that dropped the variable still counts;
2. on Kubernetes, the pod UID in `/proc/<pid>/cgroup`, mapped to a workload by a callback;
3. the process's Unix user (real uid -> name): owned by a person but no workload.
Anything else (the process vanished, /proc unreadable) is reported as unowned.

The library has no store: a `resolve_workload` callback (or mapping) turns a workload id
into (user, tenant). The `/proc` root is injectable so tests build a fake tree.
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

WORKLOAD_ENV = "GPUPOOL_WORKLOAD_ID"
MPS_SERVER = "nvidia-cuda-mps-server"
_POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)


class Via(StrEnum):
    """How an owner was found."""

    ENV = "env"  # GPUPOOL_WORKLOAD_ID in the process or an ancestor
    POD = "pod"  # Kubernetes pod UID in the cgroup path
    SLURM = "slurm"  # the Slurm job it runs in (SLURM_JOB_ID or its cgroup)
    SERVICE = "service"  # gpupool's own MPS server of a GPU
    UNIX_USER = "unix-user"  # only the Unix user is known
    NONE = "none"  # nothing known: unowned


@dataclass(frozen=True, slots=True)
class WorkloadOwner:
    """What a resolver knows about a workload id."""

    user: str | None
    tenant: str | None


@dataclass(frozen=True, slots=True)
class Attribution:
    """Who a GPU process belongs to. `workload_id is None` means no gpupool workload owns it."""

    pid: int
    via: Via
    workload_id: str | None = None
    user: str | None = None
    tenant: str | None = None
    unix_user: str | None = None
    uid: int | None = None
    pod_uid: str | None = None
    #: `namespace/name` of the pod, where the server knows it (agents' reports on Kubernetes)
    pod: str | None = None
    command: str | None = None
    source_pid: int | None = None  # the process (itself or an ancestor) that carried the id
    service_gpu: str | None = None  # Via.SERVICE: the GPU whose gpupool service this is

    @property
    def owned(self) -> bool:
        return self.workload_id is not None

    @property
    def label(self) -> str:
        """Short text for UIs: `alice/physics w-1`, `unowned (bob)`, `unowned`."""
        if self.workload_id:
            who = "/".join(x for x in (self.tenant, self.user) if x) or "?"
            return f"{who} {self.workload_id}"
        if self.via is Via.SERVICE:
            return "gpupool MPS server"
        if self.pod_uid:
            return f"outside gpupool (pod {self.pod or self.pod_uid})"
        return f"unowned ({self.unix_user})" if self.unix_user else "unowned"


Resolver = Callable[[str], WorkloadOwner | None]
Resolvable = Resolver | Mapping[str, WorkloadOwner | tuple[str | None, str | None]] | None


def _as_resolver(r: Resolvable) -> Resolver:
    if r is None:
        return lambda _wid: None
    if isinstance(r, Mapping):
        table = r

        def lookup(wid: str) -> WorkloadOwner | None:
            v = table.get(wid)
            if v is None or isinstance(v, WorkloadOwner):
                return v
            return WorkloadOwner(v[0], v[1])

        return lookup
    return r


def _user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except (KeyError, OverflowError):
        return str(uid)


class ProcReader:
    """Reads the few /proc files attribution needs; every read returns None on failure."""

    def __init__(self, root: str | Path = "/proc"):
        self.root = Path(root)
        self._prefix = str(root).rstrip("/") + "/"

    def _read(self, pid: int, name: str) -> bytes | None:
        try:
            fd = os.open(f"{self._prefix}{pid}/{name}", os.O_RDONLY)
        except OSError:
            return None
        try:
            chunks = []
            while chunk := os.read(fd, 65536):
                chunks.append(chunk)
            return b"".join(chunks)
        except OSError:
            return None
        finally:
            os.close(fd)

    def environ(self, pid: int) -> dict[str, str] | None:
        raw = self._read(pid, "environ")
        if raw is None:
            return None
        env: dict[str, str] = {}
        for item in raw.split(b"\0"):
            key, sep, value = item.partition(b"=")
            if sep:
                env[key.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
        return env

    def stat(self, pid: int) -> tuple[str, int, int] | None:
        """(command, ppid, start time in clock ticks) from /proc/<pid>/stat."""
        raw = self._read(pid, "stat")
        if raw is None:
            return None
        text = raw.decode("utf-8", "replace")
        open_, close = text.find("("), text.rfind(")")
        if open_ < 0 or close < 0:
            return None
        fields = text[close + 2 :].split()
        try:
            return text[open_ + 1 : close], int(fields[1]), int(fields[19])
        except (IndexError, ValueError):
            return None

    def program(self, pid: int) -> str | None:
        """Base name of the program (argv[0]); the command name in stat is cut at 15 chars."""
        raw = self._read(pid, "cmdline")
        if not raw:
            return None
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace").rsplit("/", 1)[-1]

    def cmdline(self, pid: int) -> str | None:
        """The whole command line, arguments joined by spaces (a process may rewrite it)."""
        raw = self._read(pid, "cmdline")
        if not raw:
            return None
        return raw.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")

    def uid(self, pid: int) -> int | None:
        raw = self._read(pid, "status")
        if raw is None:
            return None
        for line in raw.decode("utf-8", "replace").splitlines():
            if line.startswith("Uid:"):
                parts = line.split()
                return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
        return None

    def pod_uid(self, pid: int) -> str | None:
        raw = self._read(pid, "cgroup")
        if raw is None:
            return None
        m = _POD_UID.search(raw.decode("utf-8", "replace"))
        return m.group(1).replace("_", "-") if m else None


class Attributor:
    """Finds the owner of GPU processes.

    Results are cached per pid and re-checked (start time, to catch a reused pid) every
    `recheck_every` calls of `attribute_all`; `attribute()` always re-checks.

    `resolve_workload`: workload id -> WorkloadOwner (or a mapping to one / to (user, tenant)).
    `resolve_pod`: Kubernetes pod UID -> workload id.
    `user_name`: uid -> user name (default: the password database).
    `mps_daemons`: pid -> GPU UUID of the MPS control daemons gpupool runs (None: none).
    """

    def __init__(
        self,
        proc_root: str | Path = "/proc",
        resolve_workload: Resolvable = None,
        resolve_pod: Callable[[str], str | None] | Mapping[str, str] | None = None,
        user_name: Callable[[int], str | None] = _user_name,
        max_depth: int = 64,
        recheck_every: int = 10,
        mps_daemons: Callable[[], Mapping[int, str]] | None = None,
    ):
        self.proc = ProcReader(proc_root)
        self.resolve_workload = _as_resolver(resolve_workload)
        if isinstance(resolve_pod, Mapping):
            pods = resolve_pod
            self.resolve_pod: Callable[[str], str | None] = pods.get
        else:
            self.resolve_pod = resolve_pod or (lambda _uid: None)
        self.user_name = user_name
        self.mps_daemons = mps_daemons
        self.max_depth = max_depth
        self.recheck_every = max(1, recheck_every)
        self._cache: dict[int, tuple[int, Attribution, int]] = {}
        self._round = 0

    def attribute(self, pid: int) -> Attribution:
        """The owner of one process; never raises."""
        st = self.proc.stat(pid)
        start = st[2] if st else -1
        hit = self._cache.get(pid)
        if hit is not None and hit[0] == start and start != -1:
            self._cache[pid] = (start, hit[1], self._round)
            return hit[1]
        result = self._attribute(pid, st)
        if start != -1:
            self._cache[pid] = (start, result, self._round)
        return result

    def attribute_all(self, pids: Iterable[int]) -> dict[int, Attribution]:
        """Owners of many processes; forgets cached pids not in `pids`."""
        self._round += 1
        wanted = set(pids)
        for gone in set(self._cache) - wanted:
            del self._cache[gone]
        out: dict[int, Attribution] = {}
        for pid in wanted:
            hit = self._cache.get(pid)
            if hit is not None and self._round - hit[2] < self.recheck_every:
                out[pid] = hit[1]
            else:
                out[pid] = self.attribute(pid)
        return out

    def _attribute(self, pid: int, st: tuple[str, int, int] | None) -> Attribution:
        command = st[0] if st else None
        uid = self.proc.uid(pid)
        unix_user = self.user_name(uid) if uid is not None else None
        base = {"pid": pid, "command": command, "uid": uid, "unix_user": unix_user}
        gpu = self._mps_server_of(pid, st)
        if gpu is not None:
            return Attribution(via=Via.SERVICE, service_gpu=gpu, **base)
        found = self._workload_from_env(pid, st)
        if found is not None:
            wid, carrier = found
            owner = self.resolve_workload(wid)
            return Attribution(
                via=Via.ENV,
                workload_id=wid,
                user=owner.user if owner else None,
                tenant=owner.tenant if owner else None,
                source_pid=carrier,
                **base,
            )
        pod = self.proc.pod_uid(pid)
        if pod is not None:
            wid = self.resolve_pod(pod)
            owner = self.resolve_workload(wid) if wid else None
            return Attribution(
                via=Via.POD if wid else Via.UNIX_USER if unix_user else Via.NONE,
                workload_id=wid,
                user=owner.user if owner else None,
                tenant=owner.tenant if owner else None,
                pod_uid=pod,
                **base,
            )
        if unix_user is not None:
            return Attribution(via=Via.UNIX_USER, **base)
        return Attribution(via=Via.NONE, **base)

    def _mps_server_of(self, pid: int, st: tuple[str, int, int] | None) -> str | None:
        """The GPU whose gpupool MPS server `pid` is, or None."""
        if self.mps_daemons is None or st is None or not st[0].startswith("nvidia-cuda-mps"):
            return None
        gpu = self.mps_daemons().get(st[1])
        if gpu is None or self.proc.program(pid) != MPS_SERVER:
            return None
        return gpu

    def _workload_from_env(
        self, pid: int, st: tuple[str, int, int] | None
    ) -> tuple[str, int] | None:
        current, stat, seen = pid, st, set()
        for _ in range(self.max_depth):
            if current <= 0 or current in seen:
                return None
            seen.add(current)
            env = self.proc.environ(current)
            wid = (env or {}).get(WORKLOAD_ENV)
            if wid:
                return wid, current
            if stat is None or current == 1:
                return None
            current = stat[1]
            stat = self.proc.stat(current)
        return None
