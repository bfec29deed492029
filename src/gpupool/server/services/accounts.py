"""Login, tokens, users and memberships."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool

from gpupool.domain import Membership, Role, User, ValidationError
from gpupool.domain.tenancy import in_subtree
from gpupool.server.context import AppContext
from gpupool.server.principal import Principal
from gpupool.server.problems import NotAuthenticated, PermissionDenied, TooManyRequests
from gpupool.server.schemas.convert import user_out
from gpupool.server.schemas.tenancy import (
    LoginOut,
    MeOut,
    TokenOut,
    TokenSecretOut,
    UserCreateIn,
    UserOut,
    UserUpdateIn,
)
from gpupool.server.security import hash_password, new_token, verify_password
from gpupool.server.services.tenants import require_visible
from gpupool.store import NotFound, Token, TokenRepo, UserRepo


def _token_out(token: Token) -> TokenOut:
    return TokenOut.model_validate(token)


def issue_token(
    ctx: AppContext, user: str, name: str, expires_in_s: float | None
) -> TokenSecretOut:
    """Create a token for `user`; the secret is in the result and nowhere else."""
    now = ctx.clock.now()
    ttl = ctx.settings.token_ttl_s if expires_in_s is None else expires_in_s
    token_id, secret, digest = new_token()
    with ctx.store.write() as s:
        token = TokenRepo(s).issue(token_id, user, name, digest, now, now + ttl)
    return TokenSecretOut(**_token_out(token).model_dump(), token=secret)


def issue_token_for(
    ctx: AppContext, p: Principal, user: str | None, name: str, expires_in_s: float | None
) -> TokenSecretOut:
    """A token for the caller, or (admins only) for another existing user."""
    if user is None or user == p.name:
        return issue_token(ctx, p.name, name, expires_in_s)
    p.require_admin("create tokens for other users")
    with ctx.store.read() as s:
        UserRepo(s).get(user)  # unknown user: a 404 problem that names it
    return issue_token(ctx, user, name, expires_in_s)


async def login(
    ctx: AppContext, username: str, password: str, token_name: str, client: str | None
) -> LoginOut:
    """Check the password and issue a token. Throttled per account and per client address
    (`gpupool.server.throttle`): a blocked key is refused with 429 before any password check.
    The check runs in `ctx.passwords` (argon2 off the event loop, bounded)."""
    throttle = ctx.login_throttle
    keys = throttle.keys(username, client)
    try:
        # refusals cost no thread and no database: a known block, then a full password pool
        throttle.check_cached(keys)
        ctx.passwords.admit()
        try:
            await run_in_threadpool(throttle.check, keys)
        except BaseException:
            ctx.passwords.release()
            raise
    except TooManyRequests as e:
        await throttle.hold(e.retry_after_s)  # a client that does not wait is slowed down
        raise

    def check() -> bool:
        # waited in the queue: another try may have blocked a key meanwhile
        throttle.check_cached(keys)
        return _password_ok(ctx, username, password)

    if not await ctx.passwords.run_admitted(check):
        await run_in_threadpool(throttle.failed, keys)
        raise NotAuthenticated("wrong user name or password")
    return await run_in_threadpool(_logged_in, ctx, username, token_name, client)


def _password_ok(ctx: AppContext, user: str, password: str) -> bool:
    with ctx.store.read() as s:
        digest = UserRepo(s).password_hash(user)
    return verify_password(digest, password)


def _logged_in(ctx: AppContext, username: str, token_name: str, client: str | None) -> LoginOut:
    with ctx.store.read() as s:
        users = UserRepo(s)
        user = users.find(username)
        memberships = users.memberships(username) if user else []
    if user is None:  # disabled between the check and now
        raise NotAuthenticated("wrong user name or password")
    ctx.login_throttle.succeeded(user.name, client)
    tok = issue_token(ctx, user.name, token_name, None)
    return LoginOut(
        token=tok.token,
        token_id=tok.id,
        expires_at=tok.expires_at,
        user=user_out(user, memberships),
    )


def me(p: Principal) -> MeOut:
    return MeOut(**user_out(p.user, list(p.memberships)).model_dump(), token_id=p.token_id)


def list_tokens(ctx: AppContext, p: Principal, user: str | None) -> list[TokenOut]:
    if user is not None and user != p.name:
        p.require_admin("list other users' tokens")
    with ctx.store.read() as s:
        return [_token_out(r) for r in TokenRepo(s).list(user or p.name)]


def revoke_token(ctx: AppContext, p: Principal, token_id: str) -> TokenOut:
    with ctx.store.write() as s:
        repo = TokenRepo(s)
        row = repo.get(token_id)
        if row.user != p.name and not p.admin:
            # another user's token answers as a missing one: no existence oracle (review F10)
            raise NotFound(f"no token {token_id!r}; list yours with GET /api/v1/tokens")
        out = _token_out(repo.revoke(token_id, ctx.clock.now()))
    ctx.auth_changed()
    return out


def _visible_users(p: Principal, memberships: list[Membership]) -> set[str] | None:
    roots = p.managed_roots()
    if roots is None:
        return None
    return {p.name} | {m.user for m in memberships if any(in_subtree(m.tenant, r) for r in roots)}


def list_users(ctx: AppContext, p: Principal) -> list[UserOut]:
    if not p.admin and not p.managed_roots():
        raise PermissionDenied("only admins and tenant-admins may list users")
    with ctx.store.read() as s:
        repo = UserRepo(s)
        ms = repo.memberships()
        visible = _visible_users(p, ms)
        by_user: dict[str, list[Membership]] = {}
        for m in ms:
            by_user.setdefault(m.user, []).append(m)
        return [
            user_out(u, by_user.get(u.name, []))
            for u in repo.list()
            if visible is None or u.name in visible
        ]


def _no_user(name: str) -> NotFound:
    return NotFound(f"no user {name!r}; list them with GET /api/v1/users")


def _require_visible_user(repo: UserRepo, p: Principal, name: str) -> None:
    """Raise the 404 of a user that does not exist unless `p` may see `name` (itself, the
    members of tenants it manages; admins: all), checked before the user is read: whether a
    user the caller may not see exists is not told (review F10)."""
    if name == p.name or p.admin:
        return
    visible = _visible_users(p, repo.memberships())
    if visible is not None and name not in visible:
        raise _no_user(name)


def get_user(ctx: AppContext, p: Principal, name: str) -> UserOut:
    with ctx.store.read() as s:
        repo = UserRepo(s)
        _require_visible_user(repo, p, name)
        user = repo.get(name)
        ms = repo.memberships(name)
    return user_out(user, ms)


def create_user(ctx: AppContext, p: Principal | None, body: UserCreateIn) -> UserOut:
    """Create a user (admins only; `p=None` is the server itself, e.g. the first admin). A
    name equal to an existing one but for case is refused (422): JupyterHub and other tools
    may fold case, and must never map one user onto another."""
    if p is not None:
        p.require_admin("create users")
    user = User(body.name, admin=body.admin, unix_user=body.unix_user)
    digest = hash_password(body.password) if body.password else None
    with ctx.store.write() as s:
        repo = UserRepo(s)
        others = [n for n in repo.names_ignoring_case(user.name) if n != user.name]
        if others:
            raise ValidationError(
                f"user name {user.name!r} differs from the existing user {others[0]!r} only "
                "in upper/lower case; choose a name that differs in more than case",
                "name",
            )
        repo.create(user, digest, ctx.clock.now())
    return user_out(user, [])


def update_user(
    ctx: AppContext, p: Principal, name: str, body: UserUpdateIn, client: str | None = None
) -> UserOut:
    """Change a user (admins) or your own password. A new password needs the current one,
    unless an admin resets another user's; it revokes the user's other tokens (yours: all but
    the one of this request; an admin's reset: all of them, and clears the login throttle)."""
    if not p.admin and name != p.name:
        with ctx.store.read() as s:
            _require_visible_user(UserRepo(s), p, name)
    if not p.admin and (
        name != p.name
        or body.admin is not None
        or body.unix_user is not None
        or (body.disabled is not None)
    ):
        raise PermissionDenied("only an admin may change users; you may change your password")
    own = name == p.name
    if body.password is not None and own:
        _check_current_password(ctx, name, body.current_password, client)
    digest = ctx.passwords.run_blocking(hash_password, body.password) if body.password else None
    with ctx.store.write() as s:
        repo = UserRepo(s)
        user = repo.update(
            name,
            admin=body.admin,
            unix_user=body.unix_user,
            password_hash=digest,
            disabled=body.disabled,
        )
        if digest is not None:
            TokenRepo(s).revoke_all(name, ctx.clock.now(), keep=p.token_id if own else None)
        out = user_out(user, repo.memberships(name))
    if digest is not None and not own:
        ctx.login_throttle.forget(name)
    ctx.auth_changed()
    return out


def _check_current_password(
    ctx: AppContext, name: str, current: str | None, client: str | None
) -> None:
    """Raise unless `current` is `name`'s password; a wrong one counts as a failed login."""
    if current is None:
        raise ValidationError(
            "to change your password, also send your current one (current_password)",
            "current_password",
        )
    throttle = ctx.login_throttle
    keys = throttle.keys(name, client)
    throttle.check(keys)
    if not ctx.passwords.run_blocking(_password_ok, ctx, name, current):
        throttle.failed(keys)
        raise PermissionDenied("current_password is not your current password; nothing was changed")


def set_membership(ctx: AppContext, p: Principal, user: str, tenant: str, role: str) -> UserOut:
    require_visible(p, tenant)
    p.require_manage(tenant, "add members to it")
    with ctx.store.write() as s:
        repo = UserRepo(s)
        repo.set_membership(Membership(user, tenant, Role(role)))
        out = user_out(repo.get(user), repo.memberships(user))
    ctx.auth_changed()
    return out


def remove_membership(ctx: AppContext, p: Principal, user: str, tenant: str) -> UserOut:
    require_visible(p, tenant)
    p.require_manage(tenant, "remove its members")
    with ctx.store.write() as s:
        repo = UserRepo(s)
        repo.remove_membership(user, tenant)
        out = user_out(repo.get(user), repo.memberships(user))
    ctx.auth_changed()
    return out
