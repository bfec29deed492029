"""`GpupoolAuthenticator`: users log in to JupyterHub with their gpupool user name and
password; gpupool admins are hub admins.

Each login asks the gpupool server (``POST /api/v1/auth/login``). The token it returns goes
into the user's auth_state (kept only when JupyterHub has ``JUPYTERHUB_CRYPT_KEY``), where the
spawner uses it; without auth_state the spawner mints one with the hub's admin token.

Hub user names are gpupool user names exactly: `normalize_username` keeps case (JupyterHub's
default lowercases, which mapped gpupool user `Dave` onto the different user `dave`).

To use an OAuth authenticator (GitHub, GitLab, generic OIDC) instead, configure it as usual;
hub user names must equal gpupool user names exactly (see docs/jupyterhub.md).
"""

from __future__ import annotations

from typing import Any

from jupyterhub.auth import Authenticator
from traitlets import Bool, Unicode, default

from gpupool.jupyterhub.client import GpupoolAPIError, GpupoolClient, GpupoolUnavailable


class GpupoolAuthenticator(Authenticator):
    """Checks user name and password against gpupool; admin status follows gpupool."""

    gpupool_url = Unicode("http://127.0.0.1:8080", config=True, help="gpupool server URL.")

    @default("allow_all")
    def _allow_all(self) -> bool:
        # Anyone gpupool knows may log in; gpupool decides what they may run.
        return True

    manage_admins = Bool(True, config=True, help="Make gpupool admins hub admins and back.")

    def normalize_username(self, username: str) -> str:
        """The name as gpupool spells it: no case folding, no `username_map` (a hub name is
        a gpupool name, exactly)."""
        return username

    async def authenticate(self, handler: Any, data: dict[str, str]) -> dict | None:
        username = (data.get("username") or "").strip()
        password = data.get("password") or ""
        if not username or not password:
            return None
        client = GpupoolClient(self.gpupool_url)
        request = getattr(handler, "request", None)
        address = getattr(request, "remote_ip", None)
        try:
            result = await client.login(
                username, password, token_name="jupyterhub-login", client=address
            )
        except GpupoolUnavailable as e:
            self.log.error("gpupool login for %s: %s", username, e.message)
            return None
        except GpupoolAPIError as e:
            self.log.warning("gpupool refused login for %s: %s", username, e.message)
            return None
        finally:
            await client.aclose()
        user = result.get("user", {})
        model: dict[str, Any] = {
            "name": user.get("name", username),
            "auth_state": {
                "gpupool_user": user.get("name", username),
                "gpupool_token": result.get("token"),
                "gpupool_token_id": result.get("token_id"),
            },
        }
        if self.manage_admins:
            model["admin"] = bool(user.get("admin"))
        return model
