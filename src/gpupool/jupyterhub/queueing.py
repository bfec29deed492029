"""The part of gpupool's JupyterHub spawners that queues through gpupool, whatever starts
the notebook: `GpupoolQueueing`, a base class that the local spawner
(`spawner.GpupoolSpawner`, a LocalProcessSpawner) and the Kubernetes one
(`kubespawner.GpupoolKubeSpawner`, a KubeSpawner) both put first in their bases.

It gives the form (profiles the user's tenants may use, live availability, the last stop's
reason), validates `user_options`, submits the `notebook` workload as the user (a token
from the user's gpupool login, else one the hub mints with its admin token), waits in the
queue while `progress()` shows the position and reason (and a banner on the hub's other
pages), cancels it (`_cancel`), and keeps the workload id and token in the spawner's state.

Progress (the hub's spawn-pending page, whose one live message is the progress message:
templates/spawn_pending.html): the bar stays at `QUEUED_PROGRESS` (0) while the notebook is
queued, the message says "Queued for a GPU: 2nd in line for lab-a (...)"; it moves on once
gpupool grants the resources (the spawners' later steps).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from html import escape
from typing import Any

from tornado import web
from traitlets import Float, Unicode, default
from traitlets.config import LoggingConfigurable

from gpupool.domain import ACTIVE_STATES, TERMINAL_STATES, WorkloadState
from gpupool.jupyterhub import notices
from gpupool.jupyterhub.client import GpupoolAPIError, GpupoolClient, GpupoolUnavailable
from gpupool.jupyterhub.options import (
    ALLOWED_KEYS,
    OptionsError,
    pending_message,
    render_form,
    submit_tenants,
    usable_profiles,
    validate,
)

S = WorkloadState
ACTIVE = ACTIVE_STATES
#: The progress bar while the notebook waits for gpupool (asked for, queued): nothing has
#: started yet, so the bar does not move.
QUEUED_PROGRESS = 0
#: states in which this run of a notebook is over (preempted work may be requeued)
ENDED = TERMINAL_STATES | {S.PREEMPTED}
#: Why-stopped messages, by final state, for the page banner.
STOPPED_BECAUSE = {
    S.CULLED: "Your notebook was stopped by its tenant's policy (idle GPU or runtime)",
    S.PREEMPTED: "Your notebook was stopped to give a GPU back to a team within its guarantee",
    S.CANCELLED: "Your notebook was stopped by gpupool",
    S.LOST: "gpupool lost track of your notebook",
    S.FAILED: "Your notebook's GPU allocation ended",
}


async def _options_form(spawner: GpupoolQueueing) -> str:
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


class GpupoolQueueing(LoggingConfigurable):
    """Queueing through gpupool (see the module docstring): a base put before a Spawner
    class (it uses the Spawner's user, name, user_options and state), not a spawner itself."""

    # Not `api_url`/`api_token`: those are the Spawner's own (the hub API token of the notebook).
    gpupool_url = Unicode("http://127.0.0.1:8080", config=True, help="gpupool server URL.")
    gpupool_token = Unicode(
        config=True,
        help="gpupool API token with admin rights; the hub acts for its users with it.",
    )
    admission_poll_s = Float(0.2, config=True, help="How often start() asks gpupool.")
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
            "progress": QUEUED_PROGRESS,
            "message": "Asking gpupool for the profile's resources",
        }
        self._progress_changed = asyncio.Event()
        self._launched = False  # the notebook was started: progress() ends
        self._stopping = False

    # -- helpers -------------------------------------------------------------------------

    @property
    def _server_label(self) -> str:
        return f"jupyterhub/{self.user.name}/{self.name or 'default'}"

    def _admin(self) -> GpupoolClient:
        return GpupoolClient(self.gpupool_url, self.gpupool_token)

    async def _checked_user_client(self) -> GpupoolClient:
        """`_as_user`, with a token gpupool still accepts (expired or revoked: get another)
        that belongs to the gpupool user named exactly like the hub user (else 403)."""
        client = await self._as_user()
        try:
            self._check_same_user((await client.me()).get("name"))
            return client
        except GpupoolAPIError as e:
            await client.aclose()
            if e.status != 401:
                raise
        stale, self.user_token, self.user_token_id = self.user_token, "", ""
        client = await self._as_user(avoid=stale)
        try:
            self._check_same_user((await client.me()).get("name"))
        except GpupoolAPIError:
            await client.aclose()
            raise
        return client

    def _check_same_user(self, gpupool_name: object) -> None:
        """Refuse a gpupool token of another user than the hub user (names match exactly)."""
        if gpupool_name != self.user.name:
            self.user_token, self.user_token_id = "", ""
            raise GpupoolAPIError(
                403,
                f"the hub user {self.user.name!r} holds a gpupool token of user "
                f"{gpupool_name!r}; names must match exactly: log out of the hub and log in "
                "again with your gpupool user name as gpupool spells it",
            )

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

    # -- the queue -----------------------------------------------------------------------
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

    async def _queue(self, extra: Mapping[str, Any] | None = None, vouch: bool = True) -> dict:
        """Submit this server's notebook as the user (or resume the one queued before a hub
        restart) and wait until gpupool admits it; returns the workload. `extra`: more fields
        of the submission; `vouch`: send the hub's admin token along (gpupool takes a
        `pod_spec`, and while the hub runs a notebook without a command, only from the hub)."""
        choice = await self._choice()
        try:
            client = await self._checked_user_client()
        except GpupoolAPIError as e:
            raise web.HTTPError(503 if e.status >= 500 else 403, e.message) from None
        try:
            wl = await self._existing(client)
            if wl is None:
                body = {
                    "kind": "notebook",
                    "tenant": choice.tenant,
                    "profile": choice.profile["name"],
                    "name": self._server_label,
                    **(extra or {}),
                }
                try:
                    wl = await client.submit(body, self.gpupool_token if vouch else None)
                except GpupoolAPIError as e:
                    status = e.status if 400 <= e.status < 500 else 503
                    msg = f"gpupool refused the notebook: {e.message}"
                    raise web.HTTPError(status, msg) from None
            self.workload_id = wl["id"]
            self._persist_state()
            notices.set_notice(self.user.name, None)
            return await self._wait_admitted(client, wl)
        finally:
            await client.aclose()

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
                message = pending_message(wl)  # "Queued for a GPU: 2nd in line ..."
                self._set_progress(QUEUED_PROGRESS, message)
                shown = f"Your notebook is {message[:1].lower()}{message[1:]}"
                notices.set_notice(self.user.name, shown)
                await asyncio.sleep(self.admission_poll_s)
                try:
                    wl = await client.workload(wl["id"])
                except GpupoolUnavailable as e:
                    self._set_progress(
                        QUEUED_PROGRESS, f"gpupool is not answering ({e.message}); still queued"
                    )
        finally:
            if shown is not None and notices.get_notice(self.user.name) == shown:
                notices.set_notice(self.user.name, None)

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
