"""`GpupoolKubeSpawner`: notebooks on Kubernetes that queue through gpupool, whose pod
gpupool creates (Zero-to-JupyterHub: `deploy/helm/gpupool/z2jh-values.yaml`).

A KubeSpawner whose pod is not created by the hub:

1. the form, the options, the queue (position, reason, cancel) are gpupool's, as with
   `GpupoolSpawner` (`queueing.GpupoolQueueing`);
2. `start()` builds the pod from KubeSpawner's own configuration (`get_pod_manifest`:
   image, command and args, port, resources, volumes, security context, labels) and submits
   a `notebook` workload carrying it as `pod_spec` (vouched for by the hub's admin token),
   with the container's environment (the hub's JUPYTERHUB_* variables, its API token among
   them) moved to the workload's write-only `env`, which gpupool puts in a per-workload
   Secret the pod reads by `secretKeyRef` (never in the pod spec that tenant members may
   read; deleted when the pod ends);
3. once admitted, gpupool's kubernetes engine creates the pod in the tenant's namespace,
   pinned to the node and GPUs it chose, with the user's home PVC
   (`engines/kubernetes/notebooks.py`); when it runs, the workload's `endpoint`
   ("http://<pod IP>:<port>") is what `start()` returns to the hub;
4. `poll()` asks gpupool (not the Kubernetes API), `stop()` cancels the workload (gpupool
   deletes the pod). The hub needs no RBAC on pods for this spawner.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kubespawner import KubeSpawner
from tornado import web
from traitlets import Float, default

from gpupool.domain.commands import RESERVED_ENV_NAMES, RESERVED_ENV_PREFIXES
from gpupool.jupyterhub import notices
from gpupool.jupyterhub.options import pending_message
from gpupool.jupyterhub.queueing import (
    ENDED,
    STOPPED_BECAUSE,
    GpupoolQueueing,
    S,
    _latest_warning,
    _options_form,
    _simple_form,
)


def split_env(manifest: dict[str, Any]) -> dict[str, str]:
    """Take the plain variables out of the pod's first container (they go to the workload's
    write-only env; gpupool's own names are dropped: gpupool sets them). Variables from
    `valueFrom` stay in the pod."""
    containers = (manifest.get("spec") or {}).get("containers") or []
    if not containers:
        return {}
    env: dict[str, str] = {}
    kept = []
    for e in containers[0].get("env") or []:
        name = e.get("name", "")
        if "valueFrom" in e:
            kept.append(e)
        elif name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIXES):
            continue
        else:
            env[name] = str(e.get("value") or "")
    containers[0]["env"] = kept
    return env


class GpupoolKubeSpawner(GpupoolQueueing, KubeSpawner):
    """A KubeSpawner whose pods gpupool queues and creates (see the module docstring)."""

    endpoint_wait_s = Float(
        600.0,
        config=True,
        help="How long to wait, once gpupool admitted the notebook, for its pod to run "
        "(image pulls included).",
    )

    # the form and options are gpupool's, not KubeSpawner's profile list
    @default("options_form")
    def _gpupool_options_form(self) -> Any:
        return _options_form

    @default("options_from_form")
    def _gpupool_options_from_form(self) -> Any:
        return _simple_form

    async def pod_template(self) -> tuple[dict[str, Any], dict[str, str]]:
        """(the pod manifest as JSON, its environment) from KubeSpawner's configuration."""
        pod = await self.get_pod_manifest()
        manifest = self.api.api_client.sanitize_for_serialization(pod)
        env = split_env(manifest)
        return manifest, env

    async def start(self) -> Any:  # type: ignore[override]
        self._launched = False
        manifest, env = await self.pod_template()
        wl = await self._queue({"pod_spec": manifest, "env": env}, vouch=True)
        node = (wl.get("allocation") or {}).get("node")
        self._set_progress(60, f"Admitted on {node}; gpupool is creating the notebook's pod")
        endpoint = await self._wait_endpoint(wl)
        self._set_progress(90, f"The notebook's pod runs at {endpoint}")
        self._launched = True
        self._progress_changed.set()
        return endpoint

    async def _wait_endpoint(self, wl: dict) -> str:
        deadline = time.monotonic() + self.endpoint_wait_s
        wid = wl["id"]
        while True:
            if wl.get("endpoint") and wl["state"] == S.RUNNING:
                return str(wl["endpoint"])
            if wl["state"] in ENDED:
                reason = wl.get("reason") or wl["state"]
                raise web.HTTPError(409, f"gpupool did not start the notebook: {reason}")
            if wl["state"] == S.PENDING:  # its pod stayed Pending: requeued, waits again
                self._set_progress(10, f"Requeued: {pending_message(wl)}")
                deadline = time.monotonic() + self.endpoint_wait_s
            if time.monotonic() > deadline:
                raise web.HTTPError(
                    503,
                    f"the notebook's pod did not run within {self.endpoint_wait_s:.0f} s "
                    f"({wl.get('reason') or wl['state']})",
                )
            await asyncio.sleep(self.admission_poll_s)
            fresh = await self._fetch_workload(wid)
            wl = fresh if fresh is not None else wl

    async def poll(self) -> int | None:  # type: ignore[override]
        """gpupool's word on the notebook: None while it is queued or runs."""
        wid = self.workload_id
        if not wid:
            return 0
        wl = await self._fetch_workload(wid)
        if wl is None:
            return None  # gpupool not answering: assume it still runs
        state = wl["state"]
        if state in ENDED:
            if not self._stopping:
                why = STOPPED_BECAUSE.get(state, "Your notebook was stopped")
                notices.set_notice(self.user.name, f"{why}: {wl.get('reason') or state}")
            return int(wl.get("exit_code") or 1) if state == S.FAILED else 1
        if state == S.RUNNING:
            notices.set_notice(
                self.user.name, _latest_warning(wl, time.time(), self.warning_show_s)
            )
            return None
        # queued or starting: running while the hub spawns or stops it, else an orphan
        return None if (self._spawn_pending or self._stop_pending) else 0

    async def stop(self, now: bool = False) -> None:  # type: ignore[override]
        """Cancel the workload: gpupool leaves the queue or deletes the pod."""
        self._stopping = True
        try:
            if self.workload_id:  # kept: poll() then reads it ended
                await self._cancel(self.workload_id)
        finally:
            self._stopping = False

    async def progress(self) -> Any:  # type: ignore[override]
        async for event in GpupoolQueueing.progress(self):  # not KubeSpawner's pod events
            yield event
