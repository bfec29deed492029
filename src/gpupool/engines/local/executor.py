"""The local executor: jobs run as processes on this host, bound to their GPUs.

Each job runs under `gpupool.engines.local.launcher` in a session of its own (the launcher leads
its process group), with stdout and stderr in ``<state_dir>/<workload>/output.log``: every
run's, in order, each rerun after a separator line (`gpupool.engines.common.reruns`).

Who a job runs as (`UserMode`, see `gpupool.engines.common.accounts`):

- ``per-user`` (default when the server runs as root): the owner's Unix account (the user's
  `unix_user`, else the gpupool user name). No such account -> `StartError` saying what to do.
- ``single-user`` (default otherwise): no directory of accounts needed. When the server runs
  as root, each gpupool user's jobs run as an account gpupool makes for that user alone
  (`gpupool.engines.local.user_accounts`), or, only if the admin named one (`jobs_account`), as
  one shared jobs account. When it does not run as root, every job runs as the server's own
  account.
No job ever runs as root.

Environment: an allowlist, never the server's environment (`gpupool.engines.common.jobenv`). The
working directory is the account's home directory (``/`` if it has none). GPUs: the devices,
MPS limits and enforcement a job gets come from `gpupool.engines.local.binding`.

Tracking: every process of a job is found by its cgroup (where the host delegates one), its
process group and session, and its ``GPUPOOL_JOB_MARKER`` (`gpupool.engines.local.tracking`); a
stop, and the end of the job's main process, kill all of them.

Files: the state dir and each job's dir are 0700 and every file in them 0600, owned by the
server; only ``output.log`` belongs to the job's account (jobs never need the state dir).

Restart safety: everything the executor needs lives in files of the workload's state dir
(``spec.json``, ``pid`` with the process start time, ``exitcode``, ``stop.json``). A new
executor over the same directory sees running jobs (`list_running`, `poll`) and the real exit
codes of jobs that ended while no server was up. A pid whose /proc start time differs is a
reused pid, not the job.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from pathlib import Path

from gpupool.clock import Clock, SystemClock
from gpupool.domain import Allocation, Enforcement, Share, Workload
from gpupool.engines.common import logread
from gpupool.engines.common.accounts import (
    Account,
    UserMode,
    server_account,
    unprivileged,
)
from gpupool.engines.common.executor import (
    ExecState,
    ExecStatus,
    Executor,
    ExecutorWithAdoption,
    ExecutorWithAttribution,
    ExecutorWithLogs,
    ExecutorWithNotebooks,
    ExecutorWithPruning,
    ExecutorWithSharedGPUs,
    Handle,
    RunningProcess,
    StartError,
    exec_state_for_exit,
)
from gpupool.engines.common.files import write_atomic
from gpupool.engines.common.jobenv import PASS_SETTING, job_environment, passed_names
from gpupool.engines.local import notebooks
from gpupool.engines.local.binding import GPUBinding
from gpupool.engines.local.launcher import (
    ENV_FILE,
    EXIT_FILE,
    PID_FILE,
    private_dir,
    proc_starttime,
)
from gpupool.engines.local.mps import MPSManager
from gpupool.engines.local.process import LOG_FILE, spawn_launcher
from gpupool.engines.local.tracking import (
    MARKER_ENV,
    all_sessions,
    cgroup_pids,
    executor_cgroup_root,
    job_pids,
    kill_job,
    make_job_cgroup,
    new_marker,
    remove_cgroup,
    signal_pids,
)
from gpupool.engines.local.user_accounts import UserAccounts

__all__ = ["Account", "LocalExecutor", "UserMode"]

SPEC_FILE = "spec.json"
STOP_FILE = "stop.json"
SIGKILL_EXIT = 128 + signal.SIGKILL
SIGTERM_EXIT = 128 + signal.SIGTERM
_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class LocalExecutor(
    Executor,
    ExecutorWithLogs,
    ExecutorWithAdoption,
    ExecutorWithSharedGPUs,
    ExecutorWithNotebooks,
    ExecutorWithAttribution,
    ExecutorWithPruning,
):
    """Runs workloads as local processes. See the module docstring.

    `state_dir` holds one directory per workload. `resolve_unix_user(owner)` maps a gpupool
    user to a Unix account name (None: use the owner's name). `mps` manages MPS daemons of
    shared GPUs (None: fractional shares are `policed`). Single-user mode under root: each
    owner's jobs run as their own account from `accounts` (default `UserAccounts.default()`,
    made on first use), unless `jobs_account` names one shared account for all jobs.
    `cgroups`: track jobs in cgroups when the host delegates them (False: never).
    `env_pass`: server variables jobs may also see (default: $GPUPOOL_JOB_ENV_PASS).
    """

    name = "local"

    def __init__(
        self,
        state_dir: Path,
        *,
        clock: Clock | None = None,
        user_mode: UserMode | str | None = None,
        resolve_unix_user: Callable[[str], str | None] | None = None,
        mps: MPSManager | None = None,
        jobs_account: str | None = None,
        accounts: UserAccounts | None = None,
        cgroups: bool = True,
        env_pass: tuple[str, ...] | None = None,
        python: str = sys.executable,
        mig_uuid: Callable[[Share], str | None] | None = None,
    ) -> None:
        self.state_dir = Path(state_dir)
        private_dir(self.state_dir)
        self.clock = clock or SystemClock()
        self.user_mode = UserMode(user_mode) if user_mode else UserMode.default()
        if self.user_mode is UserMode.PER_USER and os.geteuid() != 0:
            raise StartError(
                "per-user mode needs the server to run as root (to start jobs as their owners); "
                "run gpupool as root or use single-user mode"
            )
        self.resolve_unix_user = resolve_unix_user or (lambda owner: None)
        self.mps = mps
        #: which devices and MPS limits a job gets; `mig_uuid` finds a MIG instance's device
        self.binding = GPUBinding(mps, mig_uuid, self._mps_users)
        #: single-user mode under root: the one account all jobs share, if the admin named it
        self.jobs_account = jobs_account
        #: single-user mode under root: the accounts gpupool makes, one per gpupool user
        self.accounts = accounts or UserAccounts.default()
        self.cgroup_root = executor_cgroup_root(self.state_dir) if cgroups else None
        #: extra server variables jobs may see (default: GPUPOOL_JOB_ENV_PASS, read once)
        self.env_pass = (
            env_pass if env_pass is not None else passed_names(os.environ.get(PASS_SETTING, ""))
        )
        self.python = python
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._final: dict[str, ExecStatus] = {}
        # start/poll/stop/tick may be called from different loop threads at once
        self._lock = threading.RLock()

    # -- helpers -------------------------------------------------------------------------
    def _dir(self, workload_id: str) -> Path:
        return self.state_dir / workload_id

    def _read_json(self, path: Path) -> dict | None:
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def _account(
        self, workload: Workload, unix_user: str | None, service: str | None = None
    ) -> Account:
        """Who the job runs as; never root (`StartError`, permanent). `unix_user` is the
        owner's account (per-user mode only); `service` the MPS service account, if any."""
        if self.user_mode is UserMode.SINGLE_USER and os.geteuid() != 0:
            return server_account()
        if self.user_mode is UserMode.SINGLE_USER:
            # a notebook is its owner's session: never the shared jobs account
            if service or (self.jobs_account and not notebooks.is_notebook(workload)):
                return unprivileged(str(service or self.jobs_account), why="cannot run the job")
            return self.accounts.ensure(workload.owner)
        name = service or unix_user or self.resolve_unix_user(workload.owner) or workload.owner
        try:
            pw = pwd.getpwnam(name)
        except KeyError:
            raise StartError(
                f"gpupool user {workload.owner!r} has no Unix account {name!r} on this host; "
                f"create it (useradd -m {name}), set the user's unix_user to an existing "
                "account, or run gpupool in single-user mode",
                permanent=True,
            ) from None
        if pw.pw_uid == 0:
            raise StartError(
                f"refusing to run {workload.owner!r}'s job as root; map the user to an "
                "unprivileged Unix account",
                permanent=True,
            )
        return Account.of(pw)

    @property
    def one_account(self) -> bool:
        """True when every user's work, notebooks included, runs as one Unix account: the
        server's own (single-user mode, not root)."""
        return self.user_mode is UserMode.SINGLE_USER and os.geteuid() != 0

    def _tracking(self, workload_id: str) -> tuple[int | None, str | None, Path | None]:
        """(leader pid while the launcher lives, marker, cgroup) of the job's latest start."""
        spec = self._read_json(self._dir(workload_id) / SPEC_FILE) or {}
        ident = self._pid(workload_id)
        leader = ident[0] if ident is not None and self._alive(workload_id) else None
        cgroup = Path(spec["cgroup"]) if spec.get("cgroup") else None
        return leader, spec.get("marker"), cgroup

    def job_pids(self, workload_id: str) -> set[int]:
        """Every live process of the job (cgroup, process group, session, marker)."""
        with self._lock:
            return job_pids(*self._tracking(workload_id))

    def _sweep(self, workload_id: str) -> None:
        """The job has ended: kill whatever of it escaped, and drop its cgroup. A launcher
        that recorded an exit code has already done so; one that was killed could not."""
        leader, marker, cgroup = self._tracking(workload_id)
        launcher_swept = (self._dir(workload_id) / EXIT_FILE).exists()
        if launcher_swept and (cgroup is None or not cgroup_pids(cgroup)):
            remove_cgroup(cgroup)
            return
        kill_job(leader, marker, cgroup)
        remove_cgroup(cgroup)

    def _mps_users(self, gpu_uuid: str) -> list[str]:
        """Unix users of live MPS clients on `gpu_uuid` (from the state dirs)."""
        users = []
        for wid in self._live_candidates():
            spec = self._read_json(self._dir(wid) / SPEC_FILE) or {}
            if spec.get("enforcement", {}).get(gpu_uuid) != Enforcement.MPS:
                continue
            if self._alive(wid):
                users.append(spec.get("unix_user", ""))
        return users

    def mps_enforcement(self, gpu_uuid: str, unix_user: str | None = None) -> Enforcement:
        user = unix_user or pwd.getpwuid(os.geteuid()).pw_name
        return self.binding.decide_mps(gpu_uuid, user)[0]

    def mps_env(self, share: Share) -> dict[str, str]:
        return self.binding.mps_env(share)

    def device_uuid(self, s: Share) -> str:
        """What CUDA_VISIBLE_DEVICES names for share `s` (`GPUBinding.device_uuid`)."""
        return self.binding.device_uuid(s)

    # -- contract ------------------------------------------------------------------------
    def start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None = None,
        unix_user: str | None = None,
    ) -> Handle:
        with self._lock:
            return self._start(workload, allocation, env=env, unix_user=unix_user)

    def _start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None,
        unix_user: str | None,
    ) -> Handle:
        if not _SAFE_ID.match(workload.id):
            raise StartError(
                f"workload id {workload.id!r} is not usable as a directory name", permanent=True
            )
        if not workload.command:
            raise StartError(f"workload {workload.id} has no command to run", permanent=True)
        if allocation is not None and allocation.multi_node:
            raise StartError(
                f"workload {workload.id} spans {len(allocation.nodes)} nodes; the local "
                "executor runs work on this host only (use the slurm or kubernetes engine)",
                permanent=True,
            )
        if self._alive(workload.id):
            raise StartError(f"workload {workload.id} is already running on this host")
        notebook = notebooks.is_notebook(workload)  # its own account, a port: notebooks.py
        service = None if notebook else self.binding.service_account(allocation)
        account = self._account(workload, unix_user, service)
        injected, enforcement, notes = self.binding.environment(workload, allocation, account.name)
        marker = new_marker(workload.id)
        injected[MARKER_ENV] = marker
        port = notebooks.free_port() if notebook else None
        if port is not None:
            env = notebooks.service_env(env, port)
            injected[notebooks.PORT_ENV] = str(port)
        job_env = job_environment(
            os.environ, account, declared=env, injected=injected, passed=self.env_pass
        )

        d = self._dir(workload.id)
        private_dir(d)
        # when the previous run (if any) was stopped: its separator line says so
        stopped_at = (self._read_json(d / STOP_FILE) or {}).get("requested_at")
        for stale in (PID_FILE, EXIT_FILE, STOP_FILE):
            (d / stale).unlink(missing_ok=True)
        self._final.pop(workload.id, None)
        previous = (self._read_json(d / SPEC_FILE) or {}).get("cgroup")
        if previous:  # an earlier run of the same workload (requeued): it has ended
            remove_cgroup(Path(previous))
        cgroup = make_job_cgroup(self.cgroup_root, workload.id, marker)
        now = self.clock.now()
        spec = {
            "workload_id": workload.id,
            "owner": workload.owner,
            "unix_user": account.name,
            "command": list(workload.command),
            "gpu_uuids": list(allocation.gpu_uuids) if allocation else [],
            "enforcement": enforcement,
            "enforcement_notes": notes,
            "started_at": now,
            "marker": marker,
            "cgroup": str(cgroup) if cgroup else None,
            "notebook": {"port": port, "uid": account.uid} if port is not None else None,
        }
        write_atomic(d / SPEC_FILE, json.dumps(spec, indent=1))
        write_atomic(d / ENV_FILE, json.dumps(job_env))
        proc = spawn_launcher(
            self.python,
            d,
            workload,
            account,
            marker=marker,
            cgroup=cgroup,
            now=now,
            stopped_at=stopped_at,
        )
        self._children[workload.id] = proc
        info = proc_starttime(proc.pid)
        if info is not None and not (d / PID_FILE).exists():
            write_atomic(d / PID_FILE, f"{proc.pid} {info[0]}\n")
        return Handle(
            workload.id,
            self.name,
            str(proc.pid),
            now,
            {k: Enforcement(v) for k, v in enforcement.items()},
        )

    def _pid(self, workload_id: str) -> tuple[int, int] | None:
        try:
            pid_s, start_s = (self._dir(workload_id) / PID_FILE).read_text().split()[:2]
            return int(pid_s), int(start_s)
        except (FileNotFoundError, ValueError):
            child = self._children.get(workload_id)
            if child is not None and child.poll() is None:
                info = proc_starttime(child.pid)
                return (child.pid, info[0]) if info else None
            return None

    def _alive(self, workload_id: str) -> bool:
        child = self._children.get(workload_id)
        if child is not None:
            child.poll()  # reap our own exited launcher so it is not a zombie
        ident = self._pid(workload_id)
        if ident is None:
            return False
        info = proc_starttime(ident[0])
        return info is not None and info[1] not in ("Z", "X") and info[0] == ident[1]

    def poll(self, workload_id: str) -> ExecStatus:
        with self._lock:
            return self._poll(workload_id)

    def _poll(self, workload_id: str) -> ExecStatus:
        if workload_id in self._final:
            return self._final[workload_id]
        d = self._dir(workload_id)
        spec = self._read_json(d / SPEC_FILE)
        if spec is None:
            return ExecStatus.unknown(workload_id)
        stop = self._read_json(d / STOP_FILE) or {}
        started = spec.get("started_at")
        reason = stop.get("reason")
        if self._alive(workload_id):
            return ExecStatus(
                workload_id,
                ExecState.RUNNING,
                started_at=started,
                stop_reason=reason,
                endpoint=notebooks.serving(spec.get("notebook")),
            )
        try:
            code_s, at_s = (d / EXIT_FILE).read_text().split()[:2]
            code, finished = int(code_s), float(at_s)
            msg = f"killed by signal {code - 128}" if code > 128 else f"exited with code {code}"
        except (FileNotFoundError, ValueError):
            if stop.get("killed_at") is not None:
                code, finished = SIGKILL_EXIT, stop["killed_at"]
                msg = "killed (SIGKILL) after its stop grace period"
            elif stop:
                code, finished = SIGTERM_EXIT, stop["requested_at"]
                msg = "ended by the stop signal before it could record an exit code"
            elif (child := self._children.get(workload_id)) is not None and (
                child.returncode is not None
            ):
                rc = child.returncode
                code, finished = (128 - rc if rc < 0 else rc or 1), self.clock.now()
                msg = f"the launcher failed (exit {child.returncode}); see the job's log"
            elif not (d / PID_FILE).exists() and workload_id not in self._children:
                # spec written, launcher never registered: the server died in between
                return ExecStatus.unknown(workload_id)
            else:
                status = ExecStatus(
                    workload_id,
                    ExecState.LOST,
                    started_at=started,
                    message="the job's process is gone and left no exit code",
                    stop_reason=reason,
                )
                self._sweep(workload_id)
                self._final[workload_id] = status
                return status
        status = ExecStatus(
            workload_id,
            exec_state_for_exit(code),
            exit_code=code,
            started_at=started,
            finished_at=finished,
            message=msg,
            stop_reason=reason,
        )
        self._sweep(workload_id)
        self._final[workload_id] = status
        self._children.pop(workload_id, None)
        return status

    def stop(self, workload_id: str, reason: str, grace_s: float = 30.0) -> None:
        with self._lock:
            self._stop(workload_id, reason, grace_s)

    def _stop(self, workload_id: str, reason: str, grace_s: float) -> None:
        d = self._dir(workload_id)
        ident = self._pid(workload_id)
        if ident is None or not self._alive(workload_id):
            return
        stop = self._read_json(d / STOP_FILE)
        now = self.clock.now()
        if stop is None:
            stop = {"reason": reason, "requested_at": now, "kill_at": now + max(0.0, grace_s)}
            write_atomic(d / STOP_FILE, json.dumps(stop))
        # every process of the job, not just the launcher's group: setsid escapes that
        signal_pids(job_pids(*self._tracking(workload_id)), signal.SIGTERM)
        if grace_s <= 0:
            self._kill(workload_id, ident[0], stop)

    def _kill(self, workload_id: str, pgid: int, stop: dict) -> None:
        stop["killed_at"] = self.clock.now()
        write_atomic(self._dir(workload_id) / STOP_FILE, json.dumps(stop))
        _leader, marker, cgroup = self._tracking(workload_id)
        kill_job(pgid, marker, cgroup)

    def tick(self) -> None:
        """Escalate overdue stops to SIGKILL; reap exited launchers."""
        with self._lock:
            self._tick()

    def _tick(self) -> None:
        now = self.clock.now()
        for wid in self._live_candidates():
            d = self._dir(wid)
            if not (d / STOP_FILE).exists():
                continue
            stop = self._read_json(d / STOP_FILE) or {}
            if stop.get("killed_at") is None and now >= stop.get("kill_at", now):
                ident = self._pid(wid)
                if ident is not None and self._alive(wid):
                    self._kill(wid, ident[0], stop)

    def _workload_ids(self) -> list[str]:
        try:
            return sorted(p.name for p in self.state_dir.iterdir() if p.is_dir())
        except FileNotFoundError:
            return []

    def _live_candidates(self) -> list[str]:
        """Workload dirs that may hold live work: those not known to have ended."""
        out = []
        for wid in self._workload_ids():
            if wid in self._final:
                continue
            if (self._dir(wid) / EXIT_FILE).exists():
                self.poll(wid)  # remember it as ended; never scanned again
                continue
            out.append(wid)
        return out

    def list_running(self) -> list[RunningProcess]:
        sessions = all_sessions()
        with self._lock:
            return self._list_running(sessions)

    def _list_running(self, sessions: dict[int, list[int]]) -> list[RunningProcess]:
        out = []
        for wid in self._live_candidates():
            if not self._alive(wid):
                continue
            spec = self._read_json(self._dir(wid) / SPEC_FILE) or {}
            ident = self._pid(wid)
            pid = ident[0] if ident else 0
            cgroup = Path(spec["cgroup"]) if spec.get("cgroup") else None
            pids = set(sessions.get(pid, [pid])) | cgroup_pids(cgroup)
            out.append(
                RunningProcess(
                    workload_id=wid,
                    ref=str(pid),
                    started_at=spec.get("started_at"),
                    user=spec.get("unix_user"),
                    gpu_uuids=tuple(spec.get("gpu_uuids", ())),
                    pids=tuple(sorted(pids)),
                )
            )
        return out

    def owners(self, container_kind: str, ids: Collection[str]) -> dict[str, str | None]:
        """None: jobs run as processes of this host, in no container an agent reports."""
        return {}

    def process_map(self) -> dict[int, str]:
        """pid -> workload id for every process of every running job (one /proc scan)."""
        return {pid: rp.workload_id for rp in self.list_running() for pid in rp.pids}

    def enforcement_of(self, workload_id: str) -> dict[str, Enforcement]:
        """Enforcement applied at start, per GPU UUID (empty if unknown)."""
        spec = self._read_json(self._dir(workload_id) / SPEC_FILE) or {}
        return {k: Enforcement(v) for k, v in spec.get("enforcement", {}).items()}

    def log_chunks(self, workload_id: str, offset: int = 0) -> Iterator[bytes]:
        """The job's output file from `offset`, streamed (none yet: no chunks)."""
        return logread.file_chunks(self._dir(workload_id) / LOG_FILE, offset)

    def log_tail(
        self, workload_id: str, lines: int, max_bytes: int = logread.TAIL_MAX_BYTES
    ) -> bytes:
        """The end of the job's output file, read from the end (none yet: empty)."""
        return logread.file_tail(self._dir(workload_id) / LOG_FILE, lines, max_bytes)

    def prune(self, older_than_s: float, now: float | None = None) -> list[str]:
        """Delete the state dirs (and logs) of jobs that ended more than `older_than_s` ago
        (by their exit time, wall clock). Live and never-ended jobs are kept. Returns ids."""
        now = time.time() if now is None else now
        removed = []
        with self._lock:
            for wid in self._workload_ids():
                d = self._dir(wid)
                try:
                    ended = float((d / EXIT_FILE).read_text().split()[1])
                except (FileNotFoundError, ValueError, IndexError):
                    continue
                if now - ended >= older_than_s and not self._alive(wid):
                    self._sweep(wid)
                    shutil.rmtree(d, ignore_errors=True)
                    self._final.pop(wid, None)
                    self._children.pop(wid, None)
                    removed.append(wid)
        return removed

    def log_path(self, workload_id: str) -> Path:
        return self._dir(workload_id) / LOG_FILE

    def close(self) -> None:
        """Forget child handles; jobs keep running and a later executor adopts them. The
        executor's cgroup subtree goes when no job cgroup is left in it."""
        self._children.clear()
        remove_cgroup(self.cgroup_root, wait_s=0)
