"""`GpupoolSpawner`: JupyterHub asks gpupool for GPUs, waits in its queue, then starts the
notebook bound to the GPUs granted.

Flow of one spawn (see docs/jupyterhub.md):

1. the form (`options_form`, async) lists the profiles the user's tenants may use, with live
   availability; `user_options` (from the form or the REST API) are validated here
   (`gpupool.jupyterhub.options`) and then by the gpupool server on submit;
2. `start()` submits a `notebook` workload without a command, as the user (a token the hub
   mints for the user with its admin token), and waits while `progress()` reports the queue
   position and reason;
3. once admitted, gpupool's `HubLaunchExecutor` writes the grant (GPU environment, and the
   Unix account and home when gpupool picks them) into the shared launch directory; the
   spawner starts the notebook with it (LocalProcessSpawner) and records the process there;
4. `poll()` notices a server-side stop (culled, preempted, cancelled by an admin) and tells
   the user why; `stop()` stops the process and releases the allocation (cancel while queued
   included). `get_state`/`load_state` keep the workload id across hub restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import stat
import time
from typing import Any

from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from tornado import web
from traitlets import Bool, Float, Unicode

from gpupool.engines.common.handoff import Grant, LaunchDir
from gpupool.jupyterhub import notices
from gpupool.jupyterhub.options import asks_gpu
from gpupool.jupyterhub.queueing import (  # noqa: F401 - re-exported for the tests and callers
    ACTIVE,
    ENDED,
    STOPPED_BECAUSE,
    GpupoolQueueing,
    S,
    _latest_warning,
    _simple_form,
)


def as_account(account: str, home: str) -> Any:
    """A preexec function that runs a notebook as the unprivileged `account` (never root) in
    `home`, which is created for it if missing (0700, owned by the account). A `home` that
    exists and is not the account's own directory is refused (HTTP 500)."""
    pw = pwd.getpwnam(account)
    if pw.pw_uid == 0:
        raise web.HTTPError(500, f"gpupool never runs notebooks as root ({account!r} is root)")
    home = os.path.normpath(home)
    if not os.path.isabs(home) or home == "/":
        raise web.HTTPError(500, f"the notebook home {home} is not a directory of {account!r}")
    parent = os.path.dirname(home)
    if not os.path.isdir(parent):  # made here: only traversable, so homes stay apart
        os.makedirs(parent, exist_ok=True)
        os.chmod(parent, 0o711)
    with contextlib.suppress(FileExistsError):
        os.mkdir(home, 0o700)
        os.chown(home, pw.pw_uid, pw.pw_gid)
    st = os.lstat(home)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != pw.pw_uid:
        raise web.HTTPError(500, f"the notebook home {home} is not a directory of {account!r}")
    switch = set_user_setuid(account, chdir=False)

    def preexec() -> None:
        switch()
        os.chdir(home)

    return preexec


class GpupoolSpawner(GpupoolQueueing, LocalProcessSpawner):
    """A LocalProcessSpawner whose GPUs come from gpupool (see the module docstring)."""

    launch_dir = Unicode(
        config=True,
        help="Hand-off directory shared with the gpupool server's HubLaunchExecutor.",
    )
    single_user_mode = Bool(
        True,
        config=True,
        help="No directory of accounts: run notebooks as the account gpupool's grant names "
        "(each user's own, when gpupool runs as root), else as the hub's own Unix user.",
    )
    jobs_account = Unicode(
        "",
        config=True,
        help="Single-user mode under root, when gpupool's grant names no account (a hub "
        "not started by gpupool up): run notebooks as this unprivileged Unix account.",
    )
    home_dir_template = Unicode(
        "/tmp/gpupool-home/{username}",
        config=True,
        help="Home (and working) directory of notebooks in single-user mode, when gpupool's "
        "grant names none.",
    )
    grant_wait_s = Float(60.0, config=True, help="How long to wait for the grant once admitted.")
    failed_start_settle_s = Float(
        30.0,
        config=True,
        help="After a notebook server failed to start: how long to wait for gpupool to record "
        "the failure (its reconciler reads it) before releasing the GPUs by a cancel.",
    )

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._grant_env: dict[str, str] = {}
        #: (account, home) the grant names: the notebook runs as it, whatever the mode
        self._run_as: tuple[str, str] | None = None
        #: the last start failed and was recorded as such (stop() then does not cancel)
        self._failed_start = False

    # -- helpers -------------------------------------------------------------------------
    @property
    def _launch(self) -> LaunchDir:
        if not self.launch_dir:
            raise web.HTTPError(
                500,
                "GpupoolSpawner.launch_dir is not set; start JupyterHub with `gpupool up` "
                "or set it to the gpupool server's hub launch directory",
            )
        return LaunchDir(self.launch_dir)

    # -- environment ---------------------------------------------------------------------
    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        env.update(self._grant_env)
        return env

    def user_env(self, env: dict[str, str]) -> dict[str, str]:
        if self._run_as is not None:
            env["USER"] = env["LOGNAME"] = self._run_as[0]
            env["HOME"] = self._run_as[1]
            return env
        if not self.single_user_mode:
            return super().user_env(env)
        env["USER"] = self.user.name
        env["HOME"] = self.home_dir
        return env

    @property
    def home_dir(self) -> str:
        if self._run_as is not None:
            return self._run_as[1]
        return self.home_dir_template.format(username=self.user.name)

    def get_args(self) -> list[str]:
        args = super().get_args()
        if self._run_as is not None:
            return args
        if self.single_user_mode and os.geteuid() == 0 and not self.jobs_account:
            # Single-user mode under root without a jobs account (tests' own hubs only;
            # gpupool up always names one): notebooks run as the hub's user.
            args.append("--ServerApp.allow_root=True")
        return args

    def make_preexec_fn(self, name: str) -> Any:
        if self._run_as is not None:
            return as_account(*self._run_as)
        if not self.single_user_mode:
            return super().make_preexec_fn(name)
        home = self.home_dir
        if self.jobs_account and os.geteuid() == 0:
            return as_account(self.jobs_account, home)
        os.makedirs(home, 0o755, exist_ok=True)

        def preexec() -> None:
            os.chdir(home)

        return preexec

    # -- start ---------------------------------------------------------------------------
    async def start(self) -> Any:
        self._launched = False
        self._grant_env = {}
        self._run_as = None
        self._failed_start = False
        wl = await self._queue()
        grant = await self._wait_grant(asks_gpu(wl))
        self._take(grant)
        if grant.gpu_uuids:
            gpus = ", ".join(grant.gpu_uuids)
            self._set_progress(80, f"GPU granted ({gpus}); starting the notebook server")
        else:
            self._set_progress(80, "CPUs and memory granted (no GPU); starting the notebook server")
        try:
            result = await super().start()
        except Exception as e:  # e.g. the account cannot run jupyterhub-singleuser
            raise self._start_failed(e) from None
        self._launch.mark_launched(self.workload_id, self.pid, time.time())
        self._launched = True
        self._progress_changed.set()
        return result

    def _start_failed(self, error: Exception) -> web.HTTPError:
        """The notebook server could not be started: record it in the hand-off directory as
        a failure with the reason (gpupool then records the workload `failed` with it, not
        `cancelled` by the user) and return the error for the hub's page."""
        account = self._run_as[0] if self._run_as else pwd.getpwuid(os.geteuid()).pw_name
        what = " ".join(self.cmd) if isinstance(self.cmd, list) else str(self.cmd)
        if isinstance(error, OSError) and error.filename:
            what = str(error.filename)
        why = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        reason = (
            f"JupyterHub could not start the notebook server as the Unix account {account}: "
            f"{why}: {what}"
        )
        if isinstance(error, PermissionError):
            reason += f" (the admin must make it readable and runnable by {account})"
        code = 127 if isinstance(error, FileNotFoundError) else 126
        with contextlib.suppress(web.HTTPError, ValueError, OSError):
            self._launch.mark_exited(self.workload_id, code, time.time(), reason=reason)
            self._failed_start = True
        self.log.error("gpupool %s: %s", self._log_name, reason)
        return web.HTTPError(500, reason)

    async def _wait_recorded(self, wid: str) -> bool:
        """After a failed start: wait (at most `failed_start_settle_s`) until gpupool has
        recorded the workload's end; False if it did not."""
        deadline = time.monotonic() + self.failed_start_settle_s
        while time.monotonic() < deadline:
            wl = await self._fetch_workload(wid)
            if wl is not None and wl["state"] not in ACTIVE:
                return True
            await asyncio.sleep(self.admission_poll_s)
        return False

    def _take(self, grant: Grant) -> None:
        """Start with `grant`: its GPU environment, and its account and home if it names
        them (gpupool picked the owner's own account)."""
        self._grant_env = dict(grant.env)
        if grant.account:
            if not grant.home:
                raise web.HTTPError(500, f"gpupool's grant names {grant.account!r} but no home")
            self._run_as = (grant.account, grant.home)

    async def _wait_grant(self, gpu: bool = True) -> Grant:
        deadline = time.monotonic() + self.grant_wait_s
        what = "GPU admitted" if gpu else "Admitted (no GPU)"
        self._set_progress(60, f"{what}; waiting for gpupool to hand it over")
        while True:
            grant = self._launch.grant(self.workload_id)
            if grant is not None:
                return grant
            if time.monotonic() > deadline:
                raise web.HTTPError(
                    503,
                    "gpupool admitted the notebook but did not hand it to JupyterHub; "
                    "the gpupool server must run with the JupyterHub launcher (gpupool up "
                    "does this) and share its launch directory with the hub",
                )
            await asyncio.sleep(self.admission_poll_s)

    async def poll(self) -> int | None:
        """None while the notebook runs. A stop gpupool made (culling, preemption, an admin)
        ends it here too, and the user is told why on the hub's pages."""
        status = await super().poll()
        if self._stopping or not self.workload_id:
            return status
        wid = self.workload_id
        try:
            stop = self._launch.stop_request(wid)
        except web.HTTPError:
            stop = None
        if stop is not None:
            notices.set_notice(
                self.user.name, f"Your notebook was stopped by gpupool: {stop.get('reason')}"
            )
        wl = await self._fetch_workload(wid)
        if wl is None:
            return status
        state = wl["state"]
        if state in ENDED:
            why = STOPPED_BECAUSE.get(state, "Your notebook was stopped")
            notices.set_notice(self.user.name, f"{why}: {wl.get('reason') or state}")
            if status is None:
                self.log.warning("gpupool ended %s: %s", self._log_name, wl.get("reason"))
                return 1
            return status
        if status is None:
            if stop is None:
                warning = _latest_warning(wl, time.time(), self.warning_show_s)
                notices.set_notice(self.user.name, warning)
            return None
        if state in (S.PENDING, S.ADMITTED, S.STARTING) and self._launch.launched(wid) is None:
            # Queued (or granted, not launched yet). While the hub stops (or starts) this
            # server, "not running" would skip stop(), which cancels the request: say
            # running. Otherwise (the hub restarted during the spawn) it is not running;
            # the hub then stops it, which cancels the orphaned request.
            return None if (self._stop_pending or self._spawn_pending) else 0
        # The notebook ended by itself (crash, shut down from JupyterLab): free its GPUs.
        await self._release(wid)
        return status

    async def _release(self, wid: str) -> None:
        """Tell gpupool the notebook is gone: it ends the workload and frees its GPUs."""
        with contextlib.suppress(web.HTTPError):
            self._launch.mark_exited(wid, 0, time.time())
        if await self._cancel(wid) and self.workload_id == wid:
            self.workload_id = ""

    async def stop(self, now: bool = False) -> None:
        self._stopping = True
        try:
            wid = self.workload_id
            # A failed start says why in the hand-off directory: let gpupool record that
            # failure (a cancel now would record "cancelled by the user").
            if wid and self._failed_start and await self._wait_recorded(wid):
                self.workload_id = ""
                wid = ""
            if wid:
                # First gpupool, so the workload ends as `cancelled` (stopped by its owner)
                # and a queued request leaves the queue at once.
                await self._cancel(wid)
            # SIGTERM right away (now=True): jupyter-server shuts down cleanly on it, while
            # its SIGINT handler waits 5 s for a confirmation that never comes without a tty,
            # which would hold the GPU 5 s longer than needed.
            await super().stop(now=True)
            if wid:
                # The process is gone: settle now, so its GPUs go to the next in line at once.
                await self._release(wid)
        finally:
            self._stopping = False
            self._failed_start = False

    # -- state ---------------------------------------------------------------------------

    # -- state ---------------------------------------------------------------------------
    def clear_state(self) -> None:
        # The workload id stays until stop() released it; the token may be reused.
        super().clear_state()
