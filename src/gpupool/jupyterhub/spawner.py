"""`GpupoolSpawner`: JupyterHub asks gpupool for GPUs, waits in its queue, then starts the
notebook bound to the GPUs granted.

Flow of one spawn (see docs/jupyterhub.md):

1. the form (`options_form`, async) lists the profiles the user's tenants may use, with live
   availability; `user_options` (from the form or the REST API) are validated here
   (`gpupool.jupyterhub.options`) and then by the gpupool server on submit;
2. `start()` submits a `notebook` workload without a command, as the user (a token the hub
   mints for the user with its admin token), and waits while `progress()` reports the queue
   position and reason;
3. once admitted, gpupool's `HubLaunchExecutor` writes the grant (GPU environment) into the
   shared launch directory; the spawner starts the notebook with it (LocalProcessSpawner)
   and records the process there;
4. `poll()` notices a server-side stop (culled, preempted, cancelled by an admin) and tells
   the user why; `stop()` stops the process and releases the allocation (cancel while queued
   included). `get_state`/`load_state` keep the workload id across hub restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import time
from html import escape
from typing import Any

from jupyterhub.spawner import LocalProcessSpawner, set_user_setuid
from tornado import web
from traitlets import Bool, Float, Unicode, default

from gpupool.domain import ACTIVE_STATES, TERMINAL_STATES, WorkloadState
from gpupool.executors.handoff import LaunchDir
from gpupool.jupyterhub import notices
from gpupool.jupyterhub.client import GpupoolAPIError, GpupoolClient, GpupoolUnavailable
from gpupool.jupyterhub.options import (
    ALLOWED_KEYS,
    OptionsError,
    asks_gpu,
    pending_message,
    render_form,
    submit_tenants,
    usable_profiles,
    validate,
)

S = WorkloadState
ACTIVE = ACTIVE_STATES
#: states in which this run of a notebook is over (preempted work may be requeued)
ENDED = TERMINAL_STATES | {S.PREEMPTED}
#: Why-stopped messages, by final state, for the page banner.
STOPPED_BECAUSE = {
    S.CULLED: "Your notebook was stopped because its GPU sat idle",
    S.PREEMPTED: "Your notebook was stopped to give a GPU back to a team within its guarantee",
    S.CANCELLED: "Your notebook was stopped by gpupool",
    S.LOST: "gpupool lost track of your notebook",
    S.FAILED: "Your notebook's GPU allocation ended",
}


async def _options_form(spawner: GpupoolSpawner) -> str:
    return await spawner.render_options_form()


def _simple_form(formdata: dict[str, Any]) -> dict[str, Any]:
    """The form's own fields (profile, tenant), single values unpacked. Other fields the hub's
    page posts (``_xsrf``) are not options; REST user_options are validated strictly."""
    return {
        k: v[0] if isinstance(v, list) and len(v) == 1 else v
        for k, v in formdata.items()
        if k in ALLOWED_KEYS
    }


def _latest_warning(workload: dict, now: float, show_s: float) -> str | None:
    """The newest warning event (the culler's `workload.cull_warning`: "idle ...; it will be
    stopped in 10 min") if it is newer than the last state change and than `show_s` seconds
    (a notebook busy again gets no new warning, so an old one must fade), else None."""
    latest_change = 0.0
    warning: tuple[float, str] | None = None
    for ev in workload.get("events") or []:
        kind, at = str(ev.get("kind", "")), float(ev.get("at") or 0.0)
        if kind.endswith("warning"):
            if warning is None or at >= warning[0]:
                warning = (at, str(ev.get("message") or ""))
        elif kind.startswith("workload."):
            latest_change = max(latest_change, at)
    if warning is None or warning[0] < latest_change or now - warning[0] > show_s:
        return None
    return warning[1] or None


def as_jobs_account(account: str, home: str) -> Any:
    """A preexec function that runs a notebook as the unprivileged `account` (never root) in
    `home`, which is created for it (0700, owned by the account)."""
    pw = pwd.getpwnam(account)
    if pw.pw_uid == 0:
        raise web.HTTPError(500, f"gpupool never runs notebooks as root ({account!r} is root)")
    parent = os.path.dirname(home.rstrip("/"))
    if not os.path.isdir(parent):  # made here: only traversable, so homes stay apart
        os.makedirs(parent, exist_ok=True)
        os.chmod(parent, 0o711)
    os.makedirs(home, 0o700, exist_ok=True)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    switch = set_user_setuid(account, chdir=False)

    def preexec() -> None:
        switch()
        os.chdir(home)

    return preexec


class GpupoolSpawner(LocalProcessSpawner):
    """A LocalProcessSpawner whose GPUs come from gpupool (see the module docstring)."""

    # Not `api_url`/`api_token`: those are the Spawner's own (the hub API token of the notebook).
    gpupool_url = Unicode("http://127.0.0.1:8080", config=True, help="gpupool server URL.")
    gpupool_token = Unicode(
        config=True,
        help="gpupool API token with admin rights; the hub acts for its users with it.",
    )
    launch_dir = Unicode(
        config=True,
        help="Hand-off directory shared with the gpupool server's HubLaunchExecutor.",
    )
    single_user_mode = Bool(
        True,
        config=True,
        help="Run notebooks as the hub's own Unix user (no per-user accounts needed).",
    )
    jobs_account = Unicode(
        "",
        config=True,
        help="Single-user mode under root: run notebooks as this unprivileged Unix account "
        "(gpupool up sets its --jobs-account), never as root.",
    )
    home_dir_template = Unicode(
        "/tmp/gpupool-home/{username}",
        config=True,
        help="Home (and working) directory of notebooks in single-user mode.",
    )
    admission_poll_s = Float(0.2, config=True, help="How often start() asks gpupool.")
    grant_wait_s = Float(60.0, config=True, help="How long to wait for the grant once admitted.")
    warning_show_s = Float(
        900.0, config=True, help="How long a culling warning stays on the hub's pages."
    )
    user_token_ttl_s = Float(7 * 86400.0, config=True, help="Lifetime of minted user tokens.")

    workload_id = Unicode("")
    user_token = Unicode("")
    user_token_id = Unicode("")

    @default("options_form")
    def _default_options_form(self) -> Any:
        return _options_form

    @default("apply_user_options")
    def _default_apply_user_options(self) -> Any:
        # user_options are validated against gpupool in start(); nothing to apply here.
        return lambda spawner, user_options: None

    @default("options_from_form")
    def _default_options_from_form(self) -> Any:
        return _simple_form

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._progress: dict[str, Any] = {
            "progress": 5,
            "message": "Asking gpupool for the profile's resources",
        }
        self._progress_changed = asyncio.Event()
        self._launched = False
        self._grant_env: dict[str, str] = {}
        self._stopping = False

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

    @property
    def _server_label(self) -> str:
        return f"jupyterhub/{self.user.name}/{self.name or 'default'}"

    def _admin(self) -> GpupoolClient:
        return GpupoolClient(self.gpupool_url, self.gpupool_token)

    async def _checked_user_client(self) -> GpupoolClient:
        """`_as_user`, with a token gpupool still accepts (expired or revoked: get another)."""
        client = await self._as_user()
        try:
            await client.me()
            return client
        except GpupoolAPIError as e:
            await client.aclose()
            if e.status != 401:
                raise
        stale, self.user_token, self.user_token_id = self.user_token, "", ""
        return await self._as_user(avoid=stale)

    async def _as_user(self, avoid: str = "") -> GpupoolClient:
        """A client acting as this hub user: the token from the user's gpupool login (auth
        state), else one the hub mints for the user with its admin token."""
        if not self.user_token:
            auth_state = await self.user.get_auth_state() if self.user else None
            if (
                auth_state
                and auth_state.get("gpupool_token")
                and auth_state["gpupool_token"] != avoid
            ):
                self.user_token = auth_state["gpupool_token"]
                self.user_token_id = auth_state.get("gpupool_token_id") or ""
        if not self.user_token:
            admin = self._admin()
            try:
                tok = await admin.create_token_for(
                    self.user.name, "jupyterhub", self.user_token_ttl_s
                )
            except GpupoolAPIError as e:
                raise GpupoolAPIError(
                    e.status,
                    f"the hub cannot act for {self.user.name} in gpupool ({e.message}); "
                    "log out and log in to the hub again with your gpupool password",
                ) from None
            finally:
                await admin.aclose()
            if tok.get("user") != self.user.name:
                raise GpupoolAPIError(
                    403, f"gpupool issued a token for {tok.get('user')!r}, not {self.user.name!r}"
                )
            self.user_token, self.user_token_id = tok["token"], tok.get("id", "")
        return GpupoolClient(self.gpupool_url, self.user_token)

    def _set_progress(self, progress: int, message: str) -> None:
        if message != self._progress.get("message"):
            self.log.info("gpupool %s: %s", self._log_name, message)
        self._progress = {"progress": progress, "message": message}
        self._progress_changed.set()

    def _persist_state(self) -> None:
        """Save the workload id now (not only after start), so a hub restart keeps it."""
        orm = getattr(self, "orm_spawner", None)
        if orm is None:
            return
        try:
            from sqlalchemy.orm import object_session

            orm.state = self.get_state()
            session = object_session(orm)
            if session is not None:
                session.commit()
        except Exception:  # the hub saves state again when start() returns
            self.log.warning("could not save spawner state early", exc_info=True)

    async def run_auth_state_hook(self, auth_state: Any) -> None:
        # A fresh login brings a fresh gpupool token: prefer it over a stored one.
        if auth_state and auth_state.get("gpupool_token"):
            self.user_token = auth_state["gpupool_token"]
            self.user_token_id = auth_state.get("gpupool_token_id") or ""
        await super().run_auth_state_hook(auth_state)

    # -- the form ------------------------------------------------------------------------
    async def _context(self) -> tuple[list[dict], list[str], list[dict], dict[str, dict]]:
        admin = self._admin()
        try:
            user, profiles, tenants, gpus = await asyncio.gather(
                admin.user(self.user.name), admin.profiles(), admin.tenants(), admin.gpus()
            )
        finally:
            await admin.aclose()
        mine = submit_tenants(user, tenants)
        return usable_profiles(profiles, mine), mine, gpus, {t["name"]: t for t in tenants}

    async def _last_stop_notice(self) -> str | None:
        notice = notices.get_notice(self.user.name)
        if notice:
            return notice
        admin = self._admin()
        try:
            recent = await admin.workloads(user=self.user.name, kind="notebook")
        except GpupoolAPIError:
            return None
        finally:
            await admin.aclose()
        mine = [w for w in recent if w.get("name") == self._server_label]
        if not mine:
            return None
        last = max(mine, key=lambda w: w.get("submitted_at") or 0)
        if last.get("state") in (S.CULLED, S.PREEMPTED):
            return f"{STOPPED_BECAUSE[last['state']]}: {last.get('reason') or ''}".rstrip(": ")
        return None

    async def render_options_form(self) -> str:
        try:
            profiles, tenants, gpus, info = await self._context()
            notice = await self._last_stop_notice()
        except GpupoolAPIError as e:
            return f'<p class="text-danger" id="gpupool-error">gpupool: {escape(e.message)}</p>'
        return render_form(profiles, tenants, gpus, info, notice)

    async def _choice(self) -> Any:
        try:
            profiles, tenants, _, _ = await self._context()
            return validate(self.user_options, profiles, tenants)
        except OptionsError as e:
            raise web.HTTPError(400, str(e)) from None
        except GpupoolAPIError as e:
            raise web.HTTPError(503 if e.status >= 500 else 400, f"gpupool: {e.message}") from None

    # -- environment ---------------------------------------------------------------------
    def get_env(self) -> dict[str, str]:
        env = super().get_env()
        env.update(self._grant_env)
        return env

    def user_env(self, env: dict[str, str]) -> dict[str, str]:
        if not self.single_user_mode:
            return super().user_env(env)
        env["USER"] = self.user.name
        env["HOME"] = self.home_dir
        return env

    @property
    def home_dir(self) -> str:
        return self.home_dir_template.format(username=self.user.name)

    def get_args(self) -> list[str]:
        args = super().get_args()
        if self.single_user_mode and os.geteuid() == 0 and not self.jobs_account:
            # Single-user mode under root without a jobs account (tests' own hubs only;
            # gpupool up always names one): notebooks run as the hub's user.
            args.append("--ServerApp.allow_root=True")
        return args

    def make_preexec_fn(self, name: str) -> Any:
        if not self.single_user_mode:
            return super().make_preexec_fn(name)
        home = self.home_dir
        if self.jobs_account and os.geteuid() == 0:
            return as_jobs_account(self.jobs_account, home)
        os.makedirs(home, 0o755, exist_ok=True)

        def preexec() -> None:
            os.chdir(home)

        return preexec

    # -- start ---------------------------------------------------------------------------
    async def _existing(self, client: GpupoolClient) -> dict | None:
        """An active or queued workload of this server (e.g. from before a hub restart)."""
        if self.workload_id:
            try:
                w = await client.workload(self.workload_id)
                if w["state"] in (S.PENDING, *ACTIVE):
                    return w
            except GpupoolAPIError as e:
                if e.status != 404:
                    raise
        self.workload_id = ""
        for w in await client.workloads(user=self.user.name, kind="notebook"):
            if w.get("name") == self._server_label and w["state"] in (S.PENDING, *ACTIVE):
                return w
        return None

    async def start(self) -> Any:
        self._launched = False
        self._grant_env = {}
        choice = await self._choice()
        try:
            client = await self._checked_user_client()
        except GpupoolAPIError as e:
            raise web.HTTPError(503 if e.status >= 500 else 403, e.message) from None
        try:
            wl = await self._existing(client)
            if wl is None:
                try:
                    wl = await client.submit(
                        {
                            "kind": "notebook",
                            "tenant": choice.tenant,
                            "profile": choice.profile["name"],
                            "name": self._server_label,
                        }
                    )
                except GpupoolAPIError as e:
                    status = e.status if 400 <= e.status < 500 else 503
                    msg = f"gpupool refused the notebook: {e.message}"
                    raise web.HTTPError(status, msg) from None
            self.workload_id = wl["id"]
            self._persist_state()
            notices.set_notice(self.user.name, None)
            wl = await self._wait_admitted(client, wl)
        finally:
            await client.aclose()
        grant = await self._wait_grant(asks_gpu(wl))
        self._grant_env = dict(grant.env)
        if grant.gpu_uuids:
            gpus = ", ".join(grant.gpu_uuids)
            self._set_progress(80, f"GPU granted ({gpus}); starting the notebook server")
        else:
            self._set_progress(80, "CPUs and memory granted (no GPU); starting the notebook server")
        result = await super().start()
        self._launch.mark_launched(self.workload_id, self.pid, time.time())
        self._launched = True
        self._progress_changed.set()
        return result

    async def _wait_admitted(self, client: GpupoolClient, wl: dict) -> dict:
        """Poll until admitted; meanwhile the progress page and the banner on the hub's other
        pages say what the notebook waits for, and why (the banner is cleared on the way out,
        however that is: admitted, ended, or the spawn cancelled)."""
        shown: str | None = None
        try:
            while True:
                state = wl["state"]
                if state in ACTIVE:
                    return wl
                if state in ENDED:
                    reason = wl.get("reason") or state
                    raise web.HTTPError(409, f"gpupool did not start the notebook: {reason}")
                message = pending_message(wl)
                self._set_progress(10, message)
                shown = f"Your notebook is queued. {message}"
                notices.set_notice(self.user.name, shown)
                await asyncio.sleep(self.admission_poll_s)
                try:
                    wl = await client.workload(self.workload_id)
                except GpupoolUnavailable as e:
                    self._set_progress(10, f"gpupool is not answering ({e.message}); still waiting")
        finally:
            if shown is not None and notices.get_notice(self.user.name) == shown:
                notices.set_notice(self.user.name, None)

    async def _wait_grant(self, gpu: bool = True) -> Any:
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

    async def progress(self) -> Any:
        """Queue position and reason while waiting, then the GPU granted."""
        last = None
        while True:
            if self._progress != last:
                last = dict(self._progress)
                yield last
            if self._launched:
                return
            self._progress_changed.clear()
            try:
                await asyncio.wait_for(self._progress_changed.wait(), timeout=5.0)
            except TimeoutError:
                continue

    # -- poll / stop ---------------------------------------------------------------------
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

    async def _fetch_workload(self, wid: str) -> dict | None:
        try:
            client = await self._as_user()
            try:
                return await client.workload(wid)
            finally:
                await client.aclose()
        except GpupoolAPIError as e:
            # gpupool down or the token expired: the notebook keeps running; try next time.
            self.log.warning("gpupool poll of %s failed: %s", self._log_name, e.message)
            return None

    async def _cancel(self, wid: str) -> bool:
        """DELETE the workload (cancel if queued, stop and release if active). False when
        gpupool could not be told (it is down); 'already ended' counts as done."""
        try:
            client = await self._as_user()
            try:
                await client.cancel(wid)
            finally:
                await client.aclose()
        except GpupoolAPIError as e:
            if e.status not in (404, 409):
                self.log.warning("gpupool did not release %s: %s", wid, e.message)
                return False
        return True

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

    # -- state ---------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        state = super().get_state()
        if self.workload_id:
            state["gpupool_workload"] = self.workload_id
        if self.user_token:
            state["gpupool_token"] = self.user_token
            state["gpupool_token_id"] = self.user_token_id
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self.workload_id = state.get("gpupool_workload", "")
        self.user_token = state.get("gpupool_token", "")
        self.user_token_id = state.get("gpupool_token_id", "")

    def clear_state(self) -> None:
        # The workload id stays until stop() released it; the token may be reused.
        super().clear_state()
