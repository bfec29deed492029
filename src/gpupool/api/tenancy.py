"""Schemas for auth, tokens, users, memberships and tenants."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from gpupool.api.base import In, Out
from gpupool.domain import ValidationError
from gpupool.domain.tenancy import (
    TENANT_NAME_PATTERN,
    USER_NAME_PATTERN,
    check_tenant_name,
    check_user_name,
)


def _rule(check: Callable[[str], str]) -> AfterValidator:
    """A domain name check as a pydantic validator whose message is the domain's."""

    def validate(value: str) -> str:
        try:
            return check(value)
        except ValidationError as e:
            raise PydanticCustomError("name_rule", "{rule}", {"rule": str(e)}) from None

    return AfterValidator(validate)


#: The pattern is published in the schema; the validator also refuses '..' and says the rule.
UserName = Annotated[
    str,
    Field(min_length=1, max_length=128, json_schema_extra={"pattern": USER_NAME_PATTERN}),
    _rule(check_user_name),
]
TenantName = Annotated[
    str,
    Field(min_length=1, max_length=255, json_schema_extra={"pattern": TENANT_NAME_PATTERN}),
    _rule(check_tenant_name),
]
#: A Unix account name (useradd's rule: lower case, no leading '-'); as create does.
UNIX_USER_PATTERN = r"^[a-z_][a-z0-9_.-]*\$?$"
TenantRole = Literal["tenant-admin", "member", "viewer"]
#: Longest idle timeout a tenant may set (a year); finite, above 0.
MAX_IDLE_TIMEOUT_S = 366 * 86400.0
#: Longest default or maximum runtime a tenant or profile may set: a workload's own bound
MAX_RUNTIME_POLICY_S = 366 * 86400.0


class LoginIn(In):
    username: str = Field(min_length=1, max_length=128)
    password: str = Field(min_length=1, max_length=1024)
    token_name: str = Field(default="login", max_length=128)


class TokenCreateIn(In):
    name: str = Field(default="", max_length=128)
    #: Lifetime in seconds; omitted: the server's default; null is not allowed (no eternal tokens).
    expires_in_s: float | None = Field(default=None, gt=0, le=366 * 86400)
    #: Admins only: issue the token for this user (e.g. JupyterHub acting for a user who
    #: logged in through an OAuth authenticator). Omitted: the caller.
    user: str | None = Field(default=None, max_length=128)


class TokenOut(Out):
    id: str
    user: str
    name: str
    created_at: float
    expires_at: float | None
    revoked_at: float | None
    last_used_at: float | None


class TokenSecretOut(TokenOut):
    token: str = Field(description="the secret; shown only in this response")


class MembershipOut(Out):
    user: str
    tenant: str
    role: TenantRole


class UserOut(Out):
    name: str
    admin: bool
    unix_user: str | None
    memberships: list[MembershipOut] = []


class MeOut(UserOut):
    token_id: str | None


class LoginOut(Out):
    token: str
    token_id: str
    expires_at: float | None
    user: UserOut


class UserCreateIn(In):
    name: UserName
    password: str | None = Field(default=None, min_length=8, max_length=1024)
    admin: bool = False
    unix_user: str | None = Field(default=None, max_length=64, pattern=UNIX_USER_PATTERN)


class UserUpdateIn(In):
    password: str | None = Field(default=None, min_length=8, max_length=1024)
    #: needed to change your own password (admins resetting another user's need not)
    current_password: str | None = Field(default=None, min_length=1, max_length=1024)
    admin: bool | None = None
    #: "" clears it (jobs then run as the account named like the user)
    unix_user: str | None = Field(
        default=None, max_length=64, pattern=f"(^$)|({UNIX_USER_PATTERN})"
    )
    disabled: bool | None = None


class MembershipIn(In):
    role: TenantRole = "member"


class QuotaIO(In):
    """GPU amounts in GPUs (fractions allowed): 0.5 is half a GPU."""

    guaranteed: float = Field(default=0, ge=0, le=1_000_000)
    limit: float | None = Field(default=None, ge=0, le=1_000_000)
    weight: float = Field(default=1.0, gt=0, le=1_000_000)
    max_per_user: float | None = Field(default=None, gt=0, le=1_000_000)
    guaranteed_by_model: dict[str, Annotated[float, Field(ge=0, le=1_000_000)]] = Field(
        default_factory=dict, max_length=64
    )


class TenantCreateIn(In):
    name: TenantName
    quota: QuotaIO = Field(default_factory=QuotaIO)
    idle_timeout_s: float | None = Field(default=None, gt=0, le=MAX_IDLE_TIMEOUT_S)
    #: the max runtime given to work that declares none (seconds); null: inherited
    default_runtime_s: float | None = Field(default=None, gt=0, le=MAX_RUNTIME_POLICY_S)
    #: the most a workload may declare (longer requests are refused); null: inherited
    max_runtime_s: float | None = Field(default=None, gt=0, le=MAX_RUNTIME_POLICY_S)


class TenantUpdateIn(In):
    quota: QuotaIO | None = None
    idle_timeout_s: float | None = Field(default=None, gt=0, le=MAX_IDLE_TIMEOUT_S)
    clear_idle_timeout: bool = False
    default_runtime_s: float | None = Field(default=None, gt=0, le=MAX_RUNTIME_POLICY_S)
    clear_default_runtime: bool = False
    max_runtime_s: float | None = Field(default=None, gt=0, le=MAX_RUNTIME_POLICY_S)
    clear_max_runtime: bool = False


class TenantOut(Out):
    name: str
    parent: str | None
    children: list[str]
    leaf: bool
    quota: QuotaIO
    idle_timeout_s: float | None
    #: runtime policy set on this tenant (null: none here; its ancestors' may apply)
    default_runtime_s: float | None = None
    max_runtime_s: float | None = None
    #: GPUs held right now by the tenant's subtree, and pending demand.
    allocated_gpus: float
    pending_gpus: float
    running: int
    pending: int
