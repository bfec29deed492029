"""`RemoteNotebookSpawner`: notebooks that gpupool's engine runs (a Slurm job, a pod), not
the hub's host — batchspawner's job, but through gpupool's queue.

Flow of one spawn:

1. the form and `user_options` are `GpupoolSpawner`'s (profiles, tenants, validation);
2. `start()` submits a `notebook` workload **with a command** (the single-user server:
   `cmd` + `get_args()`) and the hub's environment for it (`env`: the hub API token and
   URLs; write-only in gpupool, never returned), as the user; while it waits, `progress()`
   and the hub's banner show the queue position and reason (`GpupoolSpawner._wait_admitted`);
3. once admitted, the engine runs it (Slurm: `sbatch` under the tenant's account as the
   user's Unix account); `start()` waits for the endpoint the executor reports
   (``http://host:port``, `workloads.endpoint`), showing the engine's own word meanwhile
   ("pending in Slurm: Resources"), and returns it: the hub's proxy routes to it;
4. `poll()` reads the workload: alive is running; ended (culled, preempted, cancelled, the
   job died) is stopped, and the user is told why; `stop()` cancels the workload (gpupool
   stops the job: ``scancel`` on Slurm) and waits until it ended.

The steps are coroutines over a `GpupoolClient` (`wait_endpoint`, `remote_env`) so that other
engines' spawners (a KubeSpawner subclass) can share them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tornado import web
from traitlets import Float

from gpupool.domain import ACTIVE_STATES, WorkloadState
from gpupool.domain.commands import RESERVED_ENV_NAMES, RESERVED_ENV_PREFIXES
from gpupool.jupyterhub import notices
from gpupool.jupyterhub.client import GpupoolClient, GpupoolUnavailable
from gpupool.jupyterhub.spawner import ENDED, STOPPED_BECAUSE, GpupoolSpawner

S = WorkloadState
#: what the job's own account sets on the node (the hub host's values would be wrong there)
_HOST_ONLY = frozenset({"HOME", "USER", "LOGNAME", "SHELL", "PATH", "PWD"})


def remote_env(env: dict[str, str]) -> dict[str, str]:
    """The hub's environment for a notebook run elsewhere: without what gpupool sets itself
    (GPU binding: refused by the API) and the hub host's account variables."""
    return {
        k: v
        for k, v in env.items()
        if k not in RESERVED_ENV_NAMES
        and not k.startswith(RESERVED_ENV_PREFIXES)
        and k not in _HOST_ONLY
    }


async def wait_endpoint(
    client: GpupoolClient,
    workload_id: str,
    *,
    timeout_s: float,
    poll_s: float,
    progress: Any = None,
) -> str | None:
    """Poll the workload until it runs with an endpoint; return it, or None when it went
    back to gpupool's queue (the engine could not start it). `progress(pct, message)` is told
    what it waits for. `web.HTTPError` when it ends first or `timeout_s` passes."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        try:
            wl = await client.workload(workload_id)
        except GpupoolUnavailable as e:
            wl = None
            message = f"gpupool is not answering ({e.message}); still waiting"
        if wl is not None:
            state = wl["state"]
            if state in ENDED:
                reason = wl.get("reason") or state
                raise web.HTTPError(409, f"the notebook ended before it served: {reason}")
            if state == S.PENDING:
                return None
            if state == S.RUNNING and wl.get("endpoint"):
                return str(wl["endpoint"])
            message = _starting_message(wl)
        if progress is not None and message != last:
            progress(70, message)
            last = message
        if time.monotonic() > deadline:
            raise web.HTTPError(
                503, f"the notebook did not start serving within {timeout_s:.0f} s ({message})"
            )
        await asyncio.sleep(poll_s)


def _starting_message(wl: dict) -> str:
    """What the engine says while the notebook starts (the latest event's words)."""
    events = [e for e in wl.get("events") or [] if str(e.get("kind", "")).startswith("workload.")]
    said = str(events[-1].get("message") or "") if events else ""
    if wl["state"] == S.RUNNING:
        return "The notebook's job runs; waiting for its server to listen"
    return f"Admitted; the engine is starting the notebook ({said or wl['state']})"


class RemoteNotebookSpawner(GpupoolSpawner):
    """Notebooks run by gpupool's engine (see the module docstring). Configured as
    `GpupoolSpawner` (gpupool_url, gpupool_token, cmd); `gpupool up --engine slurm
    --jupyterhub` selects it."""

    endpoint_wait_s = Float(
        600.0,
        config=True,
        help="How long start() waits, once admitted, for the engine to run the notebook.",
    )

    async def start(self) -> Any:
        self._launched = False
        extra = {"command": [*self.cmd, *self.get_args()], "env": remote_env(self.get_env())}
        await self._queue(extra)  # submits (or resumes) and waits in the queue until admitted
        client = await self._checked_user_client()
        try:
            while True:
                url = await wait_endpoint(
                    client,
                    self.workload_id,
                    timeout_s=self.endpoint_wait_s,
                    poll_s=self.admission_poll_s,
                    progress=self._set_progress,
                )
                if url is not None:
                    break
                # the engine gave it back to gpupool's queue: wait to be admitted again
                await self._wait_admitted(client, await client.workload(self.workload_id))
        finally:
            await client.aclose()
        self._set_progress(90, f"The notebook serves at {url}; connecting")
        self._launched = True
        self._progress_changed.set()
        return url

    async def poll(self) -> int | None:
        if not self.workload_id:
            return 0
        wl = await self._fetch_workload(self.workload_id)
        if wl is None:
            return None  # gpupool unreachable: assume it still runs; ask again later
        state = wl["state"]
        if state in ACTIVE_STATES:
            return None
        if state in ENDED:
            why = STOPPED_BECAUSE.get(state, "Your notebook was stopped")
            if state != S.SUCCEEDED:
                notices.set_notice(self.user.name, f"{why}: {wl.get('reason') or state}")
            return 1 if state != S.SUCCEEDED else 0
        # pending (queued again after a preemption): running only while the hub spawns it
        if self._stop_pending or self._spawn_pending:
            return None
        if wl.get("preemptions"):
            notices.set_notice(
                self.user.name, f"{STOPPED_BECAUSE[S.PREEMPTED]}: {wl.get('reason') or ''}"
            )
        return 0

    async def stop(self, now: bool = False) -> None:
        wid = self.workload_id
        if not wid:
            return
        await self._cancel(wid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # until the engine ended it (the GPU is free)
            wl = await self._fetch_workload(wid)
            if wl is None or wl["state"] not in (S.PENDING, *ACTIVE_STATES):
                break
            await asyncio.sleep(self.admission_poll_s)
        if self.workload_id == wid:
            self.workload_id = ""
