"""Messages for one hub user from gpupool ("your idle notebook will be stopped in 10 min",
"your notebook was stopped: culled after 2 h without GPU use", "your notebook is queued
for CPUs and memory: 1st in line for lab-a (...)"), shown on the hub's pages (not on the
spawn-pending page, whose live progress message says it: templates/spawn_pending.html).

The spawner records them when it polls gpupool; the hub config puts `notice_for` into
``c.JupyterHub.template_vars['announcement']`` so the page banner shows the latest one. They
live in the hub process only: after a hub restart the spawn form shows the last reason again
(it asks gpupool for the user's last notebook).
"""

from __future__ import annotations

from html import escape
from threading import Lock

_lock = Lock()
_notices: dict[str, str] = {}


def set_notice(user: str, message: str | None) -> None:
    """Show `message` to `user` (None clears it)."""
    with _lock:
        if message:
            _notices[user] = message
        else:
            _notices.pop(user, None)


def get_notice(user: str) -> str | None:
    with _lock:
        return _notices.get(user)


def notice_for(user: object) -> str:
    """Template hook: the HTML-escaped notice of the current hub user ('' for none)."""
    name = getattr(user, "name", None)
    if not name:
        return ""
    msg = get_notice(name)
    return f'<span id="gpupool-announcement">{escape(msg)}</span>' if msg else ""
