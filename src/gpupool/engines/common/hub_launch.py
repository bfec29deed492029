"""Notebooks that gpupool admits and JupyterHub starts: the server's side of the hand-off.

For a `notebook` workload submitted without a command, gpupool admits and allocates as for
any workload, but JupyterHub's spawner starts the process (so JupyterHub keeps its OAuth, its
proxy routes and its own view of the server). `HubLaunchExecutor` wraps the server's real
executor and takes those workloads over; every other workload goes to the wrapped executor.
The two sides meet in a directory on this host (`gpupool.engines.common.handoff.LaunchDir`).

Who a notebook runs as: the account the wrapped executor names (`Executor.notebook_account`:
in single-user mode under root, the owner's own account), written into the grant. Where
every user's work runs as one Unix account (`Executor.one_account`: gpupool not root), one
user's notebook or job could rewrite another's notebook (its ``~/.jupyter``) and so act in
their session: there JupyterHub serves one person only, `only_owner` (the first admin);
other users' notebooks are refused at submit (403) and, if queued before, at admission.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import psutil

from gpupool.clock import Clock, SystemClock
from gpupool.domain import Allocation, Enforcement, Share, Workload
from gpupool.engines.common import logread
from gpupool.engines.common.executor import (
    ExecState,
    ExecStatus,
    Executor,
    Handle,
    NotSupported,
    PodRef,
    RunningProcess,
    StartError,
)
from gpupool.engines.common.handoff import STOPPED_EXIT, Grant, LaunchDir, is_hub_launched


def hub_launch_env(
    workload: Workload,
    allocation: Allocation | None,
    mps_env: Mapping[str, Mapping[str, str]],
    device: Callable[[Share], str] | None = None,
) -> dict[str, str]:
    """The GPU environment of a hub-launched notebook, as the local executor would set it.

    `mps_env` maps GPU UUID -> MPS client variables for fractional shares served by MPS;
    `device(share)` names a share's CUDA device (default: the GPU UUID; the local executor's
    `device_uuid` names MIG devices).
    """
    shares = allocation.shares if allocation else ()
    name = device or (lambda s: s.gpu_uuid)
    env = {
        "CUDA_VISIBLE_DEVICES": ",".join(name(s) for s in shares),
        "GPUPOOL_WORKLOAD_ID": workload.id,
        "GPUPOOL_GPU_MILLI": str(sum(s.milli for s in shares)),
    }
    for s in shares:
        env.update(mps_env.get(s.gpu_uuid, {}))
    return env


class HubLaunchExecutor(Executor):
    """Wraps `inner`; notebooks without a command are started by JupyterHub instead.

    Every method of the executor contract is answered here: for hub notebooks from the
    hand-off directory, for all other work by forwarding to `inner` (capabilities included:
    this executor has logs, MPS and pruning exactly when `inner` has them).

    `launch_timeout_s`: a grant the hub never picks up (hub down, spawn abandoned) fails
    after this long, which releases its GPUs. `only_owner`: when `inner` runs every user's
    work as one account, the one user whose notebooks may run (None: nobody's).
    """

    name = "jupyterhub"
    adopts_work = True  # notebooks live in the hand-off files; other work is `inner`'s

    def __init__(
        self,
        inner: Executor,
        launch_dir: Path | str,
        *,
        clock: Clock | None = None,
        launch_timeout_s: float = 600.0,
        only_owner: str | None = None,
    ) -> None:
        self.inner = inner
        self.only_owner = only_owner
        self.multi_node = inner.multi_node  # jobs go to `inner`; notebooks are one node
        self.dir = LaunchDir(launch_dir)
        self.dir.path.mkdir(parents=True, exist_ok=True)
        self.clock = clock or SystemClock()
        self.launch_timeout_s = launch_timeout_s

    def _mine(self, workload_id: str) -> bool:
        try:
            return self.dir.known(workload_id)
        except ValueError:
            return False

    def _mps_env(self, allocation: Allocation | None, unix_user: str | None) -> tuple[dict, dict]:
        mps_env: dict[str, dict[str, str]] = {}
        enforcement: dict[str, str] = {}
        for s in allocation.shares if allocation else ():
            got = s.enforcement
            if not s.whole and s.enforcement is Enforcement.MPS:
                got = self.inner.mps_enforcement(s.gpu_uuid, unix_user)
                if got is Enforcement.MPS:
                    mps_env[s.gpu_uuid] = dict(self.inner.mps_env(s))
            enforcement[s.gpu_uuid] = str(got)
        return mps_env, enforcement

    def _notebook_refusal(self, owner: str) -> str | None:
        if not self.inner.one_account or owner == self.only_owner:
            return None
        who = f"only {self.only_owner!r}" if self.only_owner else "nobody"
        return (
            f"JupyterHub here serves {who}: every notebook would run as one Unix account "
            "(gpupool does not run as root, or its engine runs all work as one account), "
            "where one user's notebook or job could change another user's notebook and act "
            "in their session. Ask the admin to run gpupool as root so that each user's work "
            "runs as a Unix account of their own"
        )

    # -- contract ------------------------------------------------------------------------
    @property
    def one_account(self) -> bool:
        return self.inner.one_account

    def refusal(self, workload: Workload) -> str | None:
        """Hub notebooks: refused for all but `only_owner` where every user's work shares
        one account (see the module docstring). Other work: `inner`'s answer."""
        if is_hub_launched(workload):
            return self._notebook_refusal(workload.owner)
        return self.inner.refusal(workload)

    def notebook_account(self, owner: str) -> tuple[str, str] | None:
        return self.inner.notebook_account(owner)

    def start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None = None,
        unix_user: str | None = None,
    ) -> Handle:
        if not is_hub_launched(workload):
            return self.inner.start(workload, allocation, env=env, unix_user=unix_user)
        refused = self._notebook_refusal(workload.owner)
        if refused is not None:  # queued before the rule applied (or the API was bypassed)
            raise StartError(refused, permanent=True)
        now = self.clock.now()
        account, home = self.inner.notebook_account(workload.owner) or (None, None)
        mps_env, enforcement = self._mps_env(allocation, account or unix_user)
        device = getattr(self.inner, "device_uuid", None)
        grant_env = dict(env or {}) | hub_launch_env(workload, allocation, mps_env, device)
        uuids = allocation.gpu_uuids if allocation else ()
        grant = Grant(workload.id, grant_env, uuids, enforcement, now, account, home)
        self.dir.write_grant(grant)
        return Handle(
            workload_id=workload.id,
            executor=self.name,
            ref=f"hub:{workload.id}",
            started_at=now,
            enforcement={k: Enforcement(v) for k, v in enforcement.items()},
        )

    def poll(self, workload_id: str) -> ExecStatus:
        if not self._mine(workload_id):
            return self.inner.poll(workload_id)
        stop = self.dir.stop_request(workload_id)
        stop_reason = stop["reason"] if stop else None
        exited = self.dir.exited(workload_id)
        launched = self.dir.launched(workload_id)
        grant = self.dir.grant(workload_id)
        started = launched["at"] if launched else None
        if exited is not None:
            code = int(exited["exit_code"])
            return ExecStatus(
                workload_id,
                ExecState.SUCCEEDED if code == 0 else ExecState.FAILED,
                exit_code=code,
                started_at=started,
                finished_at=exited.get("at"),
                message=exited.get("reason") or "JupyterHub stopped the notebook server",
                stop_reason=stop_reason,
            )
        if launched is None:
            if stop is not None:
                return ExecStatus(
                    workload_id,
                    ExecState.FAILED,
                    exit_code=STOPPED_EXIT,
                    message="stopped before JupyterHub started the notebook server",
                    stop_reason=stop_reason,
                )
            waited = self.clock.now() - (grant.granted_at if grant else 0.0)
            if waited > self.launch_timeout_s:
                return ExecStatus(
                    workload_id,
                    ExecState.FAILED,
                    message=f"JupyterHub did not start the notebook server within "
                    f"{self.launch_timeout_s:g} s of the GPU being granted; start it again",
                )
            return ExecStatus(workload_id, ExecState.STARTING, message="waiting for JupyterHub")
        if self.dir.alive_pid(workload_id) is not None:
            return ExecStatus(
                workload_id, ExecState.RUNNING, started_at=started, stop_reason=stop_reason
            )
        if stop is not None:
            return ExecStatus(
                workload_id,
                ExecState.FAILED,
                exit_code=STOPPED_EXIT,
                started_at=started,
                message="notebook server stopped",
                stop_reason=stop_reason,
            )
        return ExecStatus(
            workload_id,
            ExecState.SUCCEEDED,
            exit_code=0,
            started_at=started,
            message="the notebook server ended",
        )

    def stop(self, workload_id: str, reason: str, grace_s: float = 30.0) -> None:
        if not self._mine(workload_id):
            self.inner.stop(workload_id, reason, grace_s)
            return
        if self.dir.exited(workload_id) is not None:
            return
        self.dir.ask_stop(workload_id, reason, self.clock.now(), grace_s)
        pid = self.dir.alive_pid(workload_id)
        if pid is not None:
            _signal_tree(pid, signal.SIGTERM)

    def tick(self) -> None:
        self.inner.tick()
        now = self.clock.now()
        for wid in self.dir.ids():
            stop = self.dir.stop_request(wid)
            if not stop or now - float(stop["at"]) < float(stop.get("grace_s", 30.0)):
                continue
            pid = self.dir.alive_pid(wid)
            if pid is not None:
                _signal_tree(pid, signal.SIGKILL)

    def list_running(self) -> list[RunningProcess]:
        out = list(self.inner.list_running())
        for wid in self.dir.ids():
            pid = self.dir.alive_pid(wid)
            if pid is None:
                continue
            grant = self.dir.grant(wid)
            launched = self.dir.launched(wid) or {}
            out.append(
                RunningProcess(
                    workload_id=wid,
                    ref=f"hub:{wid}",
                    started_at=launched.get("at"),
                    gpu_uuids=grant.gpu_uuids if grant else (),
                    pids=tuple(_tree(pid)),
                )
            )
        return out

    def process_map(self) -> dict[int, str]:
        """pid -> workload id for every process of running work, notebooks included."""
        out = dict(self.inner.process_map())
        for rp in self.list_running():
            if rp.ref.startswith("hub:"):
                out.update({pid: rp.workload_id for pid in rp.pids})
        return out

    def pod_workloads(self) -> Mapping[str, PodRef]:
        """The wrapped executor's pods (notebooks launched here run in no pod)."""
        return self.inner.pod_workloads()

    def enforcement_of(self, workload_id: str) -> dict[str, Enforcement] | None:
        """Enforcement applied at grant (hub notebooks) or at start (other work)."""
        if self._mine(workload_id):
            grant = self.dir.grant(workload_id)
            return {k: Enforcement(v) for k, v in (grant.enforcement if grant else {}).items()}
        inner = self.inner.enforcement_of(workload_id)
        return None if inner is None else dict(inner)

    def run_times(self, workload_id: str) -> tuple[float | None, float | None] | None:
        """The wrapped executor's (hub notebooks: their allocation's times)."""
        return None if self._mine(workload_id) else self.inner.run_times(workload_id)

    def slurm_job_workloads(self) -> Mapping[str, str | None]:
        return self.inner.slurm_job_workloads()

    def log_chunks(self, workload_id: str, offset: int = 0) -> Iterator[bytes]:
        self._no_notebook_logs(workload_id)
        return self.inner.log_chunks(workload_id, offset)

    def log_tail(
        self, workload_id: str, lines: int, max_bytes: int = logread.TAIL_MAX_BYTES
    ) -> bytes:
        self._no_notebook_logs(workload_id)
        return self.inner.log_tail(workload_id, lines, max_bytes)

    def _no_notebook_logs(self, workload_id: str) -> None:
        if self._mine(workload_id):
            raise NotSupported("a notebook's output is in the JupyterHub log and in its kernels")

    def mps_enforcement(self, gpu_uuid: str, unix_user: str | None = None) -> Enforcement:
        return self.inner.mps_enforcement(gpu_uuid, unix_user)

    def mps_env(self, share: Share) -> dict[str, str]:
        return dict(self.inner.mps_env(share))

    def prune(self, older_than_s: float, now: float | None = None) -> list[str]:
        """The wrapped executor's old work (hand-off directories are kept)."""
        return self.inner.prune(older_than_s, now)

    def close(self) -> None:
        self.inner.close()


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (kernels run in sessions of their own)."""
    try:
        p = psutil.Process(pid)
        return [pid, *(c.pid for c in p.children(recursive=True))]
    except psutil.NoSuchProcess:
        return []


def _signal_tree(pid: int, sig: int) -> None:
    """SIGTERM goes to the notebook server only (it shuts its kernels down); SIGKILL to all."""
    targets = [pid] if sig == signal.SIGTERM else _tree(pid)
    for p in targets:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            continue
