"""`GpupoolSpawner`: JupyterHub asks gpupool for a notebook, waits in its queue, and routes to
the notebook server gpupool's engine runs. One spawner for every engine; a plain client of
gpupool's API (it starts no process and shares no directory with gpupool).

Flow of one spawn (see docs/jupyterhub.md):

1. the form (`options_form`, async) lists the profiles the user's tenants may use, with live
   availability; `user_options` (from the form or the REST API) are validated here
   (`gpupool.jupyterhub.options`) and then by the gpupool server on submit;
2. `start()` submits a `notebook` workload **with a command** (the single-user server: `cmd`
   + `get_args()`) and the hub's environment for it (`env`: the hub API token and URLs;
   write-only in gpupool, never returned by its API), as the user (a token from the user's
   gpupool login, else one the hub mints with its admin token), and waits while `progress()`
   and the hub's banner show the queue position and reason;
3. once admitted, gpupool's engine runs the notebook server on the granted GPUs, as the
   account its rules pick (the local engine: a process on this host listening on
   127.0.0.1; Slurm: a job; see each engine's `notebooks` module) and reports where it
   listens (``http://host:port``, the workload's `endpoint`); `start()` waits for it, showing
   the engine's own word meanwhile, and returns it: the hub's proxy routes to it;
4. `poll()` reads the workload: alive is running; ended (culled, preempted, cancelled, the
   server died) is stopped, and the user is told why; `stop()` cancels the workload (the
   engine stops the server, with its grace period) and waits until it ended, so the GPUs are
   free when it returns. `get_state`/`load_state` keep the workload id across hub restarts.

The waiting steps are functions over a `GpupoolClient` (`wait_endpoint`, `remote_env`).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from jupyterhub.spawner import Spawner
from tornado import web
from traitlets import Float

from gpupool.domain import ACTIVE_STATES
from gpupool.domain.commands import RESERVED_ENV_NAMES, RESERVED_ENV_PREFIXES
from gpupool.jupyterhub import notices
from gpupool.jupyterhub.client import GpupoolClient, GpupoolUnavailable
from gpupool.jupyterhub.queueing import (  # noqa: F401 - re-exported for the tests and callers
    ACTIVE,
    ENDED,
    STOPPED_BECAUSE,
    GpupoolQueueing,
    S,
    _latest_warning,
    _simple_form,
)

#: what the notebook's own account sets where it runs (the hub's values would be wrong there)
_HOST_ONLY = frozenset({"HOME", "USER", "LOGNAME", "SHELL", "PATH", "PWD"})


def remote_env(env: dict[str, str]) -> dict[str, str]:
    """The hub's environment for a notebook gpupool runs: without what gpupool sets itself
    (GPU binding: refused by the API) and the hub's own account variables."""
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
        return "The notebook server runs; waiting for it to listen"
    return f"Admitted; the engine is starting the notebook ({said or wl['state']})"


def _granted_message(wl: dict) -> str:
    gpus = (wl.get("allocation") or {}).get("gpu_uuids") or []
    if gpus:
        return f"GPU granted ({', '.join(gpus)}); starting the notebook server"
    return "CPUs and memory granted (no GPU); starting the notebook server"


class GpupoolSpawner(GpupoolQueueing, Spawner):
    """Notebooks that gpupool queues and its engine runs (see the module docstring)."""

    endpoint_wait_s = Float(
        600.0,
        config=True,
        help="How long start() waits, once admitted, for the engine to run the notebook.",
    )
    stop_wait_s = Float(
        60.0, config=True, help="How long stop() waits for gpupool to end the notebook."
    )

    async def start(self) -> Any:
        self._launched = False
        extra = {"command": [*self.cmd, *self.get_args()], "env": remote_env(self.get_env())}
        wl = await self._queue(extra)  # submits (or resumes) and waits until admitted
        self._set_progress(60, _granted_message(wl))
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
        """None while the notebook is alive. A stop gpupool made (culling, preemption, an
        admin) reads as stopped, and the user is told why on the hub's pages."""
        if not self.workload_id:
            return 0
        wl = await self._fetch_workload(self.workload_id)
        if wl is None:
            return None  # gpupool unreachable: assume it still runs; ask again later
        state = wl["state"]
        if state in ACTIVE_STATES:
            if state == S.RUNNING:
                warning = _latest_warning(wl, time.time(), self.warning_show_s)
                notices.set_notice(self.user.name, warning)
            return None
        if state in ENDED:
            why = STOPPED_BECAUSE.get(state, "Your notebook was stopped")
            if state != S.SUCCEEDED and not self._stopping:
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
        """Cancel the workload (a queued one leaves the queue; a running one is stopped by
        its engine) and wait until it ended, so its GPUs are free."""
        wid = self.workload_id
        if not wid:
            return
        self._stopping = True
        try:
            await self._cancel(wid)
            deadline = time.monotonic() + self.stop_wait_s
            while time.monotonic() < deadline:
                wl = await self._fetch_workload(wid)
                if wl is None or wl["state"] not in (S.PENDING, *ACTIVE_STATES):
                    break
                await asyncio.sleep(self.admission_poll_s)
            if self.workload_id == wid:
                self.workload_id = ""
        finally:
            self._stopping = False

    def clear_state(self) -> None:
        # The workload id stays until stop() released it; the token may be reused.
        super().clear_state()
