"""The Slurm executor: gpupool admits, Slurm runs.

`start` submits one batch job per workload::

    sbatch --parsable --job-name=gpupool-<id> --comment=gpupool:<id> --nodelist=<node>
           --gres=gpu:<type>:<n> --account=<tenant's account> --uid=<owner> --gid=<owner's>
           --output=<output dir>/<id>.out --open-mode=append --export=NONE [--time=<min>]

A multi-node allocation (a gang) is one job on the nodes gpupool chose, GPUs per node::

    sbatch ... --nodes=<N> --nodelist=<node>,<node>,... --ntasks-per-node=1 --gres=gpu:<type>:<G>

and its script runs the command once per node through ``srun --kill-on-bad-exit=1`` (one
node failing ends them all) with the environment of `engines.common.gangenv`: ``MASTER_ADDR`` is
Slurm's first node of the job (where the batch script runs), ``NODE_RANK`` Slurm's
``SLURM_NODEID``. Its state is the state of the whole job.

(`--uid`/`--gid` when gpupool runs as root: the job runs as the owner's own Unix account,
never root, resolved as the local executor does, `engines.common.accounts`). The script `exec`s the
workload's command; its environment is the local executor's allowlist (`engines.common.jobenv`),
exported inside the script (`jobscript`): sbatch itself runs with the server's fixed
environment (`cli`), never the workload's.
Slurm binds the GPUs itself (``CUDA_VISIBLE_DEVICES`` are Slurm's indices on the node). A
fraction of one GPU is submitted as ``--gres=shard:<n>`` where the node has ``gres/shard``
(`shards`; enforcement `none`), and refused with what to do where it has none.

Slurm's own start and end of each job (`run_times`) are what accounting counts, not when
gpupool noticed; `owners` maps job ids to workloads for the agents' reports;
`prune` removes the output files of jobs that ended long ago. Notebooks (with a command) run
wrapped so that gpupool learns their endpoint (`notebooks`).

State comes from `squeue --json` (read once per reconciler pass, in `tick`, and on demand
when older than `refresh_s`) and, for jobs squeue no longer lists, `sacct --json`. Jobs are
found by name, so a new gpupool process adopts what an earlier one submitted.

A job Slurm still keeps PENDING `pending_timeout_s` (30 s) after its start is cancelled and
reported `REJECTED` with Slurm's reason (``Resources``, ``AssocGrpGRES``…): the reconciler
requeues the workload in gpupool's queue with that reason.

`stop` marks the job stopped in slurmctld (its Comment, `jobscript.stop_comment`: a batch
script that has not started yet stops itself when it does) and sends SIGTERM to the job
(``scancel --signal=TERM --full``); once `grace_s` passed on the injected clock, `tick` sends
SIGKILL (``scancel --signal=KILL --full``) and cancels it. A pending job is just cancelled.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import shlex
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpupool.clock import Clock
from gpupool.domain import Allocation, Enforcement, Workload, WorkloadKind
from gpupool.engines.common import logread, reruns
from gpupool.engines.common.accounts import (
    Account,
    default_jobs_account,
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
    ExecutorWithMultiNode,
    ExecutorWithNotebooks,
    ExecutorWithPruning,
    ExecutorWithRunTimes,
    ExecutorWithSharedGPUs,
    Handle,
    RunningProcess,
    StartError,
)
from gpupool.engines.common.jobenv import job_environment, passed_names
from gpupool.engines.slurm.cli import (
    SlurmCLI,
    SlurmError,
    epoch,
    exit_code_of,
    number,
    state_of,
)
from gpupool.engines.slurm.gres import gres_option
from gpupool.engines.slurm.jobscript import EXPORT, gang_script, stop_comment, with_environment
from gpupool.engines.slurm.notebooks import notebook_script, port_file, serving
from gpupool.engines.slurm.output import LAUNCH_FAILURE, launch_failure, prune_outputs
from gpupool.engines.slurm.power import SlurmNodePools
from gpupool.engines.slurm.shards import SHARD_ENFORCEMENT
from gpupool.telemetry.containers import SLURM_JOB

log = logging.getLogger(__name__)

PREFIX = "gpupool-"
_ALIVE = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING"}
_PENDING = {"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"}


@dataclass
class _Job:
    job_id: str
    submitted_at: float
    output: Path
    user: str = ""
    gpu_uuids: tuple[str, ...] = ()
    stop_reason: str | None = None
    stop_at: float | None = None
    killed: bool = False
    rejected: str | None = None
    #: GPUs whose share runs on gres/shard (enforcement `none`)
    shard_uuids: tuple[str, ...] = ()
    #: Slurm's own start and end of the job (epoch seconds), once known
    started: float | None = None
    ended: float | None = None
    #: a notebook's port file (`notebooks`), None for other work
    port_path: Path | None = None
    #: the job's Unix account's uid, where this process submitted it
    uid: int | None = None
    #: a notebook's endpoint once it served there ("": not yet)
    serving: str = ""
    #: whole GPUs (not MIG instances, not shards)
    whole_uuids: tuple[str, ...] = ()


@dataclass
class _Snapshot:
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)  # workload id -> squeue job
    read_at: float = -math.inf
    #: every listed Slurm job id -> its workload (None: not gpupool's)
    by_job: dict[str, str | None] = field(default_factory=dict)


def workload_of(job: Mapping[str, Any]) -> str | None:
    name = str(job.get("name") or "")
    return name[len(PREFIX) :] if name.startswith(PREFIX) else None


class SlurmExecutor(
    Executor,
    ExecutorWithLogs,
    ExecutorWithAdoption,
    ExecutorWithMultiNode,
    ExecutorWithSharedGPUs,
    ExecutorWithNotebooks,
    ExecutorWithAttribution,
    ExecutorWithRunTimes,
    ExecutorWithPruning,
    SlurmNodePools,
):
    """Runs workloads as Slurm batch jobs (see the module docstring).

    account_of(tenant) -> Slurm account; ensure_user(unix_user, account) makes the
    association before a submission (`engine.SlurmAccounts`); `per_user`: jobs run as their
    owners' accounts (needs root); else as the server's account.
    """

    name = "slurm"  # multi-node: sbatch --nodes=N --nodelist=<the nodes gpupool chose>

    def __init__(
        self,
        cli: SlurmCLI,
        clock: Clock,
        output_dir: Path,
        *,
        account_of: Callable[[str], str],
        ensure_user: Callable[[str, str], None] = lambda user, account: None,
        per_user: bool | None = None,
        partition: str | None = None,
        pending_timeout_s: float = 30.0,
        refresh_s: float = 1.0,
        gpu_types: Mapping[str, str] | None = None,
        sync: Callable[[], object] | None = None,
    ) -> None:
        self.cli, self.clock, self.output_dir = cli, clock, output_dir
        self.account_of, self.ensure_user = account_of, ensure_user
        self.per_user = os.geteuid() == 0 if per_user is None else per_user
        self.partition = partition
        self.pending_timeout_s, self.refresh_s = pending_timeout_s, refresh_s
        #: GPU uuid -> Slurm GRES type (from the inventory)
        self.gpu_types: dict[str, str] = dict(gpu_types or {})
        #: node -> gres/shard shards per GPU (from the inventory; 0 or missing: none)
        self.shards_per_gpu: dict[str, int] = {}
        #: what keeps a job off the node's other GPUs (the engine reads Slurm's config)
        self.whole_enforcement = Enforcement.NONE
        #: node -> the address its services are reached at (Slurm's NodeAddr; inventory)
        self.node_addresses: dict[str, str] = {}
        self.sync = sync
        self._jobs: dict[str, _Job] = {}
        self._snap = _Snapshot()
        output_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(output_dir, 0o711)  # jobs open their own file by name; nobody lists

    # -- reading Slurm ----------------------------------------------------------------
    def refresh(self) -> _Snapshot:
        """Read `squeue --json` now (all of gpupool's jobs, by workload id; the newest job
        of a workload wins)."""
        by_id: dict[str, dict[str, Any]] = {}
        by_job: dict[str, str | None] = {}
        for j in self.cli.jobs():
            wid = workload_of(j)
            by_job[str(j.get("job_id"))] = wid
            if wid is None:
                continue
            old = by_id.get(wid)
            if old is None or int(j.get("job_id") or 0) > int(old.get("job_id") or 0):
                by_id[wid] = j
        self._snap = _Snapshot(by_id, time.monotonic(), by_job)
        return self._snap

    def _queue(self) -> _Snapshot:
        if time.monotonic() - self._snap.read_at > self.refresh_s:
            return self.refresh()
        return self._snap

    # -- the contract -----------------------------------------------------------------
    def start(
        self,
        workload: Workload,
        allocation: Allocation | None,
        *,
        env: Mapping[str, str] | None = None,
        unix_user: str | None = None,
    ) -> Handle:
        if not workload.command:
            raise StartError("the workload has no command to run", permanent=True)
        shares = allocation.shares if allocation else ()
        # GRES are per node: a gang's head node stands for each of its nodes
        here = allocation.on_node(allocation.node) if allocation else ()
        node = allocation.node if allocation else ""
        gres = gres_option(here, node, self.gpu_types, self.shards_per_gpu.get(node, 0))
        account = self._account(unix_user or workload.owner)
        slurm_account = self.account_of(workload.tenant)
        try:
            self.ensure_user(account.name, slurm_account)
        except SlurmError as e:
            raise StartError(f"could not give {account.name} the Slurm account: {e}") from None
        output = self.output_dir / f"{workload.id}.out"
        output.touch(mode=0o600, exist_ok=True)
        prev = self._jobs.get(workload.id)  # a rerun: appended after a separator line
        stopped = prev.ended if prev else None
        reruns.mark_new_run_at(output, reruns.separator(workload, self.clock.now(), stopped))
        if os.geteuid() == 0:  # the job's account writes its output
            os.chown(output, account.uid, account.gid)
        args = [
            f"--job-name={PREFIX}{workload.id}",
            f"--comment=gpupool:{workload.id}",
            f"--account={slurm_account}",
            f"--output={output}",
            "--open-mode=append",
            EXPORT,
            f"--chdir={account.home if os.path.isdir(account.home) else '/tmp'}",
        ]
        gang = allocation is not None and allocation.multi_node
        if allocation is not None and gang:
            nodes = allocation.nodes
            args += [f"--nodes={len(nodes)}", f"--nodelist={','.join(nodes)}"]
            args.append("--ntasks-per-node=1")
        elif allocation is not None:
            args.append(f"--nodelist={allocation.node}")
        if gres:
            args.append(gres)
        if self.partition:
            args.append(f"--partition={self.partition}")
        if workload.max_runtime_s:
            args.append(f"--time={max(1, math.ceil(workload.max_runtime_s / 60))}")
        if os.geteuid() == 0:  # as root, Slurm would otherwise run the job as root
            args += [f"--uid={account.uid}", f"--gid={account.gid}"]
        job_env = job_environment(
            os.environ,
            account,
            declared=env,
            injected={"GPUPOOL_WORKLOAD_ID": workload.id},
            passed=passed_names(os.environ.get("GPUPOOL_JOB_ENV_PASS", "")),
        )
        port_path = None
        if allocation is not None and gang:
            script = gang_script(allocation, workload.command)
        elif workload.kind is WorkloadKind.NOTEBOOK:
            port_path = port_file(self.output_dir, workload.id)
            port_path.unlink(missing_ok=True)  # a port from an earlier run is stale
            port_path.touch(mode=0o600)
            if os.geteuid() == 0:
                os.chown(port_path, account.uid, account.gid)
            script = notebook_script(workload.command, port_path)
        else:
            script = "#!/bin/sh\nexec " + shlex.join(workload.command) + "\n"
        try:
            job_id = self.cli.sbatch(args, with_environment(script, job_env), cwd="/")
        except SlurmError as e:
            raise StartError(f"Slurm refused the job: {e}") from None
        now = self.clock.now()
        uuids = tuple(s.gpu_uuid for s in shares)
        sharded = uuids if gres.startswith("--gres=shard:") else ()
        whole = tuple(s.gpu_uuid for s in shares if s.whole and s.mig_profile is None)
        self._jobs[workload.id] = _Job(
            job_id,
            now,
            output,
            account.name,
            uuids,
            shard_uuids=sharded,
            port_path=port_path,
            uid=account.uid,
            whole_uuids=whole,
        )
        self._snap.read_at = -math.inf  # the next poll reads squeue again
        return Handle(workload.id, self.name, job_id, now)

    def _account(self, user: str) -> Account:
        """Who the job runs as: its owner (per-user), else one account for every job — the
        jobs account when gpupool runs as root, never root itself."""
        if self.per_user:
            return unprivileged(user, why=f"cannot run {user}'s job under their own Unix account")
        if os.geteuid() == 0:
            name = default_jobs_account()
            return unprivileged(name, why=f"cannot run jobs as the jobs account {name}")
        return server_account()

    @property
    def one_account(self) -> bool:
        """Every user's work shares one account unless jobs run as their owners (`_account`);
        the hub then serves the first admin only (`server.services.notebooks`)."""
        return not self.per_user

    def poll(self, workload_id: str) -> ExecStatus:
        job = self._jobs.get(workload_id)
        if job is not None and job.rejected is not None:
            return ExecStatus(workload_id, ExecState.REJECTED, message=job.rejected)
        raw = self._queue().jobs.get(workload_id)
        if raw is not None and (job is None or str(raw.get("job_id")) == job.job_id):
            job = job or self._adopt(workload_id, raw)
            return self._status(workload_id, job, raw)
        if job is None:
            return ExecStatus.unknown(workload_id)
        return self._from_accounting(workload_id, job)

    def _adopt(self, workload_id: str, raw: Mapping[str, Any]) -> _Job:
        job = _Job(
            str(raw.get("job_id")),
            self.clock.now(),
            Path(str(raw.get("standard_output") or self.output_dir / f"{workload_id}.out")),
            str(raw.get("user_name") or ""),
        )
        job.started = epoch(raw.get("start_time"))
        port_path = port_file(self.output_dir, workload_id)
        job.port_path = port_path if port_path.exists() else None
        self._jobs[workload_id] = job
        return job

    def _status(self, wid: str, job: _Job, raw: Mapping[str, Any]) -> ExecStatus:
        st = state_of(raw.get("job_state"))
        started = number(raw.get("start_time")) if st not in _PENDING else None
        if started:
            job.started = float(started)
        if st in _PENDING:
            reason = str(raw.get("state_reason") or "")
            return self._pending(wid, job, "" if reason == "None" else reason)
        if st in _ALIVE:
            state = ExecState.RUNNING if st != "CONFIGURING" else ExecState.STARTING
            return ExecStatus(
                wid,
                state,
                started_at=started,
                message=st.lower(),
                stop_reason=job.stop_reason,
                endpoint=self._endpoint(job, raw) if state is ExecState.RUNNING else None,
            )
        why = str(raw.get("state_reason") or "")
        where = str(raw.get("batch_host") or raw.get("nodes") or "")
        end = number(raw.get("end_time"))
        return self._ended(wid, job, st, exit_code_of(raw), end, why, where)

    def _endpoint(self, job: _Job, raw: Mapping[str, Any]) -> str | None:
        """Where a running notebook serves, once its job wrote its port and something
        listens there (`notebooks.serving`)."""
        node = str(raw.get("batch_host") or raw.get("nodes") or "")
        if job.port_path is None or not node:
            return None
        job.serving = job.serving or serving(job.port_path, self.node_addresses.get(node, node))
        return job.serving or None

    def _pending(self, wid: str, job: _Job, reason: str) -> ExecStatus:
        waited = self.clock.now() - job.submitted_at
        if job.stop_reason is None and waited >= self.pending_timeout_s:
            try:
                self.cli.scancel(job.job_id)
            except SlurmError:
                pass  # it may have just started or ended; the next poll tells
            else:
                job.rejected = (
                    f"Slurm kept job {job.job_id} pending for {waited:.0f} s "
                    f"(reason: {reason or 'none given'}); back in gpupool's queue"
                )
                return ExecStatus(wid, ExecState.REJECTED, message=job.rejected)
        return ExecStatus(
            wid,
            ExecState.STARTING,
            message=f"pending in Slurm: {reason or 'no reason given'}",
            stop_reason=job.stop_reason,
        )

    def _ended(
        self,
        wid: str,
        job: _Job,
        st: str,
        code: int | None,
        end: int | None,
        reason: str = "",
        node: str = "",
    ) -> ExecStatus:
        """The status of an ended job; `reason` is Slurm's (squeue's ``state_reason``)."""
        if st == "CANCELLED" and (code is None or code == 0):
            code = 137 if job.killed else 143
        if st in ("TIMEOUT", "PREEMPTED", "NODE_FAIL", "OUT_OF_MEMORY", "DEADLINE") and not code:
            code = 137 if st != "TIMEOUT" else 143
        if code is None:
            return ExecStatus(wid, ExecState.LOST, message=f"Slurm says {st.lower()}")
        state = ExecState.SUCCEEDED if code == 0 and st == "COMPLETED" else ExecState.FAILED
        if end and job.started is not None:
            job.ended = float(end)
        if state is ExecState.FAILED and code == 0:
            code = 1
        return ExecStatus(
            wid,
            state,
            exit_code=code,
            finished_at=float(end) if end else None,
            message=self._ended_message(job, st, reason, node),
            stop_reason=job.stop_reason,
        )

    def _ended_message(self, job: _Job, st: str, reason: str, node: str) -> str:
        """ "Slurm job N failed", with Slurm's reason where it says more than the exit code
        (`output.launch_failure` for a job slurmd could not start)."""
        if reason == LAUNCH_FAILURE and job.stop_reason is None:
            return launch_failure(job.job_id, node, job.output, job.user, job.uid)
        said = f"Slurm job {job.job_id} {st.lower()}"
        if reason in ("", "None", "NonZeroExitCode") or job.stop_reason is not None:
            return said
        return f"{said} (Slurm's reason: {reason})"

    def _from_accounting(self, wid: str, job: _Job) -> ExecStatus:
        recs = [r for r in self.cli.accounting([job.job_id]) if str(r.get("job_id")) == job.job_id]
        if not recs:
            if self.clock.now() - job.submitted_at < 60:
                return ExecStatus(wid, ExecState.STARTING, message="not in Slurm's lists yet")
            return ExecStatus(wid, ExecState.LOST, message=f"Slurm has no job {job.job_id}")
        rec = recs[-1]
        if job.started is None:
            job.started = epoch((rec.get("time") or {}).get("start"))
        state = rec.get("state") or {}
        st = state_of(state.get("current") if isinstance(state, dict) else state)
        if st in _ALIVE:
            return ExecStatus(wid, ExecState.RUNNING, stop_reason=job.stop_reason)
        end = number((rec.get("time") or {}).get("end"))
        return self._ended(wid, job, st, exit_code_of(rec), end)

    def stop(self, workload_id: str, reason: str, grace_s: float = 30.0) -> None:
        job = self._jobs.get(workload_id)
        if job is None:
            raw = self._queue().jobs.get(workload_id)
            if raw is None or state_of(raw.get("job_state")) not in _ALIVE:
                return
            job = self._adopt(workload_id, raw)
        if job.stop_reason is not None or job.rejected is not None:
            return
        # squeue now, not the pass's snapshot: a job listed pending a moment ago may run by
        # now, and cancelling it outright would skip the polite signal
        raw = self.refresh().jobs.get(workload_id)
        if raw is not None and str(raw.get("job_id")) != job.job_id:
            raw = None  # an earlier job of the workload
        if raw is not None and state_of(raw.get("job_state")) not in _ALIVE:
            return  # it ended: stopping finished work changes nothing
        job.stop_reason = reason
        job.stop_at = self.clock.now() + grace_s
        pending = raw is not None and state_of(raw.get("job_state")) in _PENDING
        if not pending:  # a script that has not started yet stops when it does (`jobscript`)
            with contextlib.suppress(SlurmError):
                self.cli.set_comment(job.job_id, stop_comment(workload_id))
        with contextlib.suppress(SlurmError):  # already ended
            self.cli.scancel(job.job_id, None if pending else "TERM")
        self._snap.read_at = -math.inf

    def tick(self) -> None:
        """Read squeue once for this pass; cancel stopped work whose grace is over; sync."""
        now = self.clock.now()
        try:
            snap = self.refresh()
        except SlurmError as e:  # each poll will say so too; the sync may still work
            log.warning("reading squeue failed: %s", e)
            snap = _Snapshot()
        for wid, job in self._jobs.items():
            raw = snap.jobs.get(wid)
            alive = raw is not None and state_of(raw.get("job_state")) in _ALIVE
            if job.stop_at is not None and not job.killed and alive and now >= job.stop_at:
                job.killed = True
                with contextlib.suppress(SlurmError):  # gpupool's grace was the grace
                    self.cli.scancel(job.job_id, "KILL")
                with contextlib.suppress(SlurmError):
                    self.cli.scancel(job.job_id)
        if self.sync is not None:
            self.sync()

    def list_running(self) -> list[RunningProcess]:
        out = []
        for wid, raw in self.refresh().jobs.items():
            if state_of(raw.get("job_state")) in _ALIVE:
                out.append(
                    RunningProcess(
                        wid,
                        str(raw.get("job_id")),
                        started_at=number(raw.get("start_time")),
                        user=str(raw.get("user_name") or ""),
                    )
                )
        return out

    def held_gpus(self) -> set[str]:
        """GPU uuids of gpupool's live jobs started by this executor."""
        snap = self._snap
        return {
            u
            for wid, job in self._jobs.items()
            if wid in snap.jobs and state_of(snap.jobs[wid].get("job_state")) in _ALIVE
            for u in job.gpu_uuids
        }

    def run_times(self, workload_id: str) -> tuple[float | None, float | None] | None:
        """Slurm's start and end of the workload's current job ((None, None) before it
        started or while this process does not know it yet)."""
        job = self._jobs.get(workload_id)
        if job is None or job.rejected is not None:
            return (None, None)
        return (job.started, job.ended)

    def owners(self, container_kind: str, ids: Collection[str]) -> dict[str, str | None]:
        """Slurm jobs (`SLURM_JOB`) -> their workloads, for every job in the last `squeue`
        read and every job this process submitted (None: a job gpupool did not submit)."""
        if container_kind != SLURM_JOB.name:
            return {}
        jobs = dict(self._snap.by_job)
        jobs.update({j.job_id: wid for wid, j in self._jobs.items()})
        return {i: jobs[i] for i in ids if i in jobs}

    def enforcement_of(self, workload_id: str) -> dict[str, Enforcement] | None:
        """Shares run on gres/shard: `none` (Slurm only counts shards); whole GPUs:
        `whole_enforcement` (`hardware` where Slurm's cgroups deny the job other devices,
        else `none`: nothing polices them here); MIG instances as planned. None for a job
        this process did not start (an earlier one recorded it)."""
        job = self._jobs.get(workload_id)
        if job is None or not (job.shard_uuids or job.whole_uuids):
            return None
        return {
            **{u: self.whole_enforcement for u in job.whole_uuids},
            **{u: SHARD_ENFORCEMENT for u in job.shard_uuids},
        }

    def prune(self, older_than_s: float, now: float | None = None) -> list[str]:
        """Remove the output files (and this process's memory) of jobs whose output was
        last written more than `older_than_s` ago on the clock and that Slurm no longer runs.
        Returns their workload ids."""
        now = self.clock.now() if now is None else now
        try:
            alive = {
                wid
                for wid, raw in self.refresh().jobs.items()
                if state_of(raw.get("job_state")) in _ALIVE
            }
        except SlurmError as e:  # without squeue nothing is known to be over
            log.warning("not pruning old job output: %s", e)
            return []
        removed = prune_outputs(self.output_dir, alive, now, older_than_s)
        for wid in removed:
            self._jobs.pop(wid, None)
        return removed

    def _output(self, workload_id: str) -> Path:
        job = self._jobs.get(workload_id)
        return job.output if job else self.output_dir / f"{workload_id}.out"

    def log_chunks(self, workload_id: str, offset: int = 0) -> Iterator[bytes]:
        """The job's output file (sbatch --output) from `offset`, streamed."""
        return logread.file_chunks(self._output(workload_id), offset)

    def log_tail(
        self, workload_id: str, lines: int, max_bytes: int = logread.TAIL_MAX_BYTES
    ) -> bytes:
        """The end of the job's output file, read from the end."""
        return logread.file_tail(self._output(workload_id), lines, max_bytes)
