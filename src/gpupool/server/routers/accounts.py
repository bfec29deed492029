"""/auth, /tokens, /users."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request, Response

from gpupool.server.auth import (
    CSRF_HEADER,
    authenticated,
    clear_session_cookie,
    csrf_token,
    set_session_cookie,
)
from gpupool.server.context import AppContext, get_ctx
from gpupool.server.principal import Principal
from gpupool.server.schemas.tenancy import (
    LoginIn,
    LoginOut,
    MembershipIn,
    MeOut,
    TokenCreateIn,
    TokenOut,
    TokenSecretOut,
    UserCreateIn,
    UserOut,
    UserUpdateIn,
)
from gpupool.server.services import accounts

router = APIRouter()


@router.post(
    "/auth/login",
    tags=["auth"],
    summary="Log in; returns a new API token",
    responses={429: {"description": "too many failed logins, or too many at once: retry later"}},
)
async def login(
    body: LoginIn, request: Request, response: Response, ctx: AppContext = Depends(get_ctx)
) -> LoginOut:
    client = request.client.host if request.client else None
    out = await accounts.login(ctx, body.username, body.password, body.token_name, client)
    set_session_cookie(response, request, ctx, out.token, ctx.settings.token_ttl_s)
    return out


@router.post("/auth/logout", tags=["auth"], summary="Revoke the token used for this request")
def logout(
    request: Request,
    response: Response,
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> TokenOut | None:
    clear_session_cookie(response, request, ctx)
    if p.token_id is None:
        return None
    return accounts.revoke_token(ctx, p, p.token_id)


@router.get(
    "/auth/csrf",
    tags=["auth"],
    summary="The CSRF token that cookie-authenticated POST/PUT/PATCH/DELETE requests send",
)
def csrf(
    request: Request,
    _: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> dict[str, str]:
    """`{"header": "X-CSRF-Token", "token": ...}` for the session cookie of this request
    (requests with a bearer token need none; they get the token of that bearer token)."""
    auth = request.headers.get("authorization", "")
    secret = auth.partition(" ")[2] or request.cookies.get(ctx.settings.cookie_name, "")
    return {"header": CSRF_HEADER, "token": csrf_token(secret)}


@router.get("/auth/me", tags=["auth"], summary="Who am I, and my roles")
def me(p: Principal = Depends(authenticated)) -> MeOut:
    return accounts.me(p)


@router.get("/tokens", tags=["tokens"], summary="My tokens (admins: ?user=NAME)")
def list_tokens(
    user: str | None = None,
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> list[TokenOut]:
    return accounts.list_tokens(ctx, p, user)


@router.post("/tokens", tags=["tokens"], status_code=201, summary="New token (secret shown once)")
def create_token(
    body: TokenCreateIn, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> TokenSecretOut:
    return accounts.issue_token_for(ctx, p, body.user, body.name, body.expires_in_s)


@router.delete("/tokens/{token_id}", tags=["tokens"], summary="Revoke a token")
def revoke_token(
    token_id: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> TokenOut:
    return accounts.revoke_token(ctx, p, token_id)


@router.get("/users", tags=["users"], summary="Users (admins: all; tenant-admins: their members)")
def list_users(
    p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> list[UserOut]:
    return accounts.list_users(ctx, p)


@router.post("/users", tags=["users"], status_code=201, summary="Create a user (admin)")
def create_user(
    body: UserCreateIn, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> UserOut:
    return accounts.create_user(ctx, p, body)


@router.get("/users/{name}", tags=["users"])
def get_user(
    name: str, p: Principal = Depends(authenticated), ctx: AppContext = Depends(get_ctx)
) -> UserOut:
    return accounts.get_user(ctx, p, name)


@router.patch(
    "/users/{name}",
    tags=["users"],
    summary="Change a user (admin) or my password (with current_password)",
)
def update_user(
    name: str,
    body: UserUpdateIn,
    request: Request,
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> UserOut:
    client = request.client.host if request.client else None
    return accounts.update_user(ctx, p, name, body, client)


@router.put(
    "/users/{name}/memberships/{tenant:path}",
    tags=["users"],
    summary="Add a user to a tenant or change the role (tenant-admin of the tenant, admin)",
)
def set_membership(
    name: str,
    tenant: str,
    body: MembershipIn,
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> UserOut:
    return accounts.set_membership(ctx, p, name, tenant, body.role)


@router.delete("/users/{name}/memberships/{tenant:path}", tags=["users"])
def remove_membership(
    name: str,
    tenant: str,
    p: Principal = Depends(authenticated),
    ctx: AppContext = Depends(get_ctx),
) -> UserOut:
    return accounts.remove_membership(ctx, p, name, tenant)
