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
import threading
from dataclasses import dataclass

from fastapi import Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from gpupool.domain import Membership, Role, User
from gpupool.server.context import AppContext, get_ctx
from gpupool.server.problems import NotAuthenticated, PermissionDenied
from gpupool.server.security import hash_token
from gpupool.store import TokenRepo, UserRepo, role_in

#: last_used_at is written at most this often per token (keeps reads read-only).
TOUCH_EVERY_S = 60.0
#: A checked token is trusted this long without asking the database again. Revocation and
#: role changes made through this server take effect at once (the cache is cleared); made
#: through another replica, within this many seconds.
CACHE_TTL_S = 5.0

#: The header a cookie-authenticated state-changing request carries its CSRF token in.
CSRF_HEADER = "X-CSRF-Token"
#: Methods that never change state: no CSRF token needed.
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: The session cookie's path on gpupool's own port: the API. Never `/`: cookies are not
#: isolated by port (RFC 6265 section 8.5), and a hub on the same host serves `/user/...`.
API_COOKIE_PATH = "/api/v1/"

_bearer = HTTPBearer(auto_error=False, description="an API token from POST /api/v1/auth/login")


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller and what it may do."""

    user: User
    memberships: tuple[Membership, ...]
    token_id: str | None = None

    @property
    def name(self) -> str:
        return self.user.name

    @property
    def admin(self) -> bool:
        return self.user.admin

    def role_on(self, tenant: str) -> Role | None:
        if self.admin:
            return Role.ADMIN
        return role_in(list(self.memberships), tenant)

    def can_read(self, tenant: str) -> bool:
        return self.role_on(tenant) is not None

    def can_submit(self, tenant: str) -> bool:
        return self.role_on(tenant) in (Role.ADMIN, Role.TENANT_ADMIN, Role.MEMBER)

    def can_manage(self, tenant: str) -> bool:
        """Manage the tenant's workloads and members."""
        return self.role_on(tenant) in (Role.ADMIN, Role.TENANT_ADMIN)

    def can_configure(self, tenant: str) -> bool:
        """Create/edit/delete `tenant` itself: admins, and tenant-admins of an ancestor."""
        if self.admin:
            return True
        return any(
            m.role is Role.TENANT_ADMIN and tenant.startswith(m.tenant + "/")
            for m in self.memberships
        )

    def readable_roots(self) -> list[str] | None:
        """Tenant subtrees this caller may read; None means all."""
        return None if self.admin else sorted({m.tenant for m in self.memberships})

    def managed_roots(self) -> list[str] | None:
        if self.admin:
            return None
        return sorted({m.tenant for m in self.memberships if m.role is Role.TENANT_ADMIN})

    def require_admin(self, what: str) -> None:
        if not self.admin:
            raise PermissionDenied(f"only an admin may {what}")

    def require_read(self, tenant: str) -> None:
        if not self.can_read(tenant):
            raise PermissionDenied(f"you have no role in tenant {tenant!r}; ask its tenant-admin")

    def require_manage(self, tenant: str, what: str) -> None:
        if not self.can_manage(tenant):
            raise PermissionDenied(f"only a tenant-admin of {tenant!r} or an admin may {what}")


class TokenCache:
    """Recently checked tokens: sha256 -> (checked at, principal, expires at). Thread-safe."""

    def __init__(self, ttl_s: float = CACHE_TTL_S, max_entries: int = 10_000):
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[str, tuple[float, Principal, float | None]] = {}
        self._lock = threading.Lock()

    def get(self, digest: str, now: float) -> Principal | None:
        with self._lock:
            hit = self._entries.get(digest)
        if hit is None:
            return None
        checked, principal, expires = hit
        if now - checked > self.ttl_s or now < checked or (expires is not None and now >= expires):
            return None
        return principal

    def put(self, digest: str, now: float, principal: Principal, expires: float | None) -> None:
        with self._lock:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[digest] = (now, principal, expires)

    def clear(self) -> None:
        """Forget everything (after a revocation or a change of users or roles)."""
        with self._lock:
            self._entries.clear()


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
