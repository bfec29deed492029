"""Authentication (bearer token or session cookie) and the role rules every route applies.

The session cookie is the dashboard's: scoped to gpupool's own paths (`session_cookie_path`),
never `/`, so it does not reach a JupyterHub user's server on the same host; `Secure` behind
TLS. A cookie-authenticated request that changes state (POST, PUT, PATCH, DELETE) must carry
the session's CSRF token (`csrf_token`, from `GET /auth/csrf`) in the `X-CSRF-Token` header.
Bearer-token requests need no CSRF token: a browser never sends one by itself.

Roles: `admin` (everything); `tenant-admin` (its tenant's subtree: manage workloads and
members; create and edit sub-tenants); `member` (submit and manage own workloads, read its
tenant); `viewer` (read its tenant). A membership on a tenant covers its whole subtree.
"""

from __future__ import annotations

import hashlib
import hmac

from fastapi import Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from gpupool.server.context import AppContext, get_ctx
from gpupool.server.principal import Principal
from gpupool.server.problems import NotAuthenticated, PermissionDenied
from gpupool.server.security import hash_token
from gpupool.store import TokenRepo, UserRepo

#: last_used_at is written at most this often per token (keeps reads read-only).
TOUCH_EVERY_S = 60.0
#: The header a cookie-authenticated state-changing request carries its CSRF token in.
CSRF_HEADER = "X-CSRF-Token"
#: Methods that never change state: no CSRF token needed.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: The session cookie's path on gpupool's own port: the API. Never `/`: cookies are not
#: isolated by port (RFC 6265 section 8.5), and a hub on the same host serves `/user/...`.
API_COOKIE_PATH = "/api/v1/"

_bearer = HTTPBearer(auto_error=False, description="an API token from POST /api/v1/auth/login")


def principal_for_token(ctx: AppContext, secret: str) -> Principal:
    now = ctx.clock.now()
    digest = hash_token(secret)
    cached = ctx.auth_cache.get(digest, now)
    if cached is not None:
        return cached
    with ctx.store.read() as s:
        tok = TokenRepo(s).by_hash(digest)
        if tok is None or tok.revoked_at is not None:
            raise NotAuthenticated("the token is unknown or revoked; log in again (gpupool login)")
        if tok.expires_at is not None and tok.expires_at <= now:
            raise NotAuthenticated("the token has expired; log in again (gpupool login)")
        users = UserRepo(s)
        user = users.find(tok.user)
        if user is None:
            raise NotAuthenticated(f"user {tok.user!r} is disabled or gone; ask an admin")
        memberships = tuple(users.memberships(user.name))
        stale = tok.last_used_at is None or now - tok.last_used_at >= TOUCH_EVERY_S
        token_id, expires = tok.id, tok.expires_at
    if stale:
        with ctx.store.write() as s:
            TokenRepo(s).touch(token_id, now)
    principal = Principal(user, memberships, token_id)
    ctx.auth_cache.put(digest, now, principal, expires)
    return principal


class CSRFMissing(PermissionDenied):
    """A cookie-authenticated request that changes state came without its CSRF token."""


def csrf_token(session_secret: str) -> str:
    """The CSRF token of a session: an HMAC keyed by the session's own secret, so it is bound
    to that session, needs no server state, and reveals nothing of the secret."""
    return hmac.new(session_secret.encode(), b"gpupool-csrf-v1", hashlib.sha256).hexdigest()


def check_csrf(request: Request, session_secret: str) -> None:
    """Raise CSRFMissing (403) unless a state-changing request carries the session's token."""
    if request.method in SAFE_METHODS:
        return
    sent = request.headers.get(CSRF_HEADER, "")
    if not sent or not hmac.compare_digest(sent.encode(), csrf_token(session_secret).encode()):
        raise CSRFMissing(
            f"this request is authenticated by the session cookie and changes state, so it "
            f"needs the {CSRF_HEADER} header: get the value with GET /api/v1/auth/csrf "
            "(the dashboard does this itself; reload the page), or send "
            "'Authorization: Bearer <token>' instead of the cookie"
        )


def session_cookie_path(request: Request) -> str:
    """Where the session cookie goes: under the path prefix the request came through (the
    hub's `/services/gpupool/`), else the API's own path; never `/`."""
    root = str(request.scope.get("root_path", "")).rstrip("/")
    return f"{root}/" if root else API_COOKIE_PATH


def cookie_secure(request: Request, ctx: AppContext) -> bool:
    """Whether the session cookie gets `Secure`: GPUPOOL_COOKIE_SECURE is on, or the request
    came over https (uvicorn applies X-Forwarded-Proto from the proxies it trusts)."""
    return ctx.settings.cookie_secure or request.url.scheme == "https"


def set_session_cookie(
    response: Response, request: Request, ctx: AppContext, secret: str, max_age_s: float
) -> None:
    """Set the session cookie: HttpOnly, SameSite=Lax, gpupool's path only, Secure behind
    TLS."""
    response.set_cookie(
        ctx.settings.cookie_name,
        secret,
        max_age=int(max_age_s),
        httponly=True,
        samesite="lax",
        secure=cookie_secure(request, ctx),
        path=session_cookie_path(request),
    )


def clear_session_cookie(response: Response, request: Request, ctx: AppContext) -> None:
    """Delete the session cookie (and one a release before scoped paths left at `/`)."""
    for path in {session_cookie_path(request), "/"}:
        response.delete_cookie(
            ctx.settings.cookie_name,
            path=path,
            httponly=True,
            samesite="lax",
            secure=cookie_secure(request, ctx),
        )


async def authenticated(
    request: Request,
    creds: HTTPAuthorizationCredentials | None = Depends(_bearer),
    ctx: AppContext = Depends(get_ctx),
) -> Principal:
    """FastAPI dependency: the caller, from `Authorization: Bearer <token>` or the session
    cookie. Raises 401 when neither holds a valid token, and 403 for a cookie-authenticated
    state-changing request without the session's CSRF token (`check_csrf`). A recently
    checked token is answered from the cache without leaving the event loop; otherwise the
    database is asked from a worker thread."""
    secret = creds.credentials if creds is not None else None
    from_cookie = secret is None
    if from_cookie:
        secret = request.cookies.get(ctx.settings.cookie_name)
    if not secret:
        raise NotAuthenticated(
            "authentication required: send 'Authorization: Bearer <token>' "
            "(get one with POST /api/v1/auth/login or `gpupool login`)"
        )
    principal = ctx.auth_cache.get(hash_token(secret), ctx.clock.now())
    if principal is None:
        principal = await run_in_threadpool(principal_for_token, ctx, secret)
    if from_cookie:
        check_csrf(request, secret)
    return principal
