"""Secrets: password hashing (argon2) and API tokens (random, stored as SHA-256)."""

from __future__ import annotations

import hashlib
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

_hasher = PasswordHasher()
#: A valid hash to verify against when the user does not exist, so timing does not tell.
_DUMMY_HASH = _hasher.hash("gpupool-no-such-user")

TOKEN_PREFIX = "gp_"
MIN_PASSWORD_LENGTH = 8


def hash_password(password: str) -> str:
    if len(password) < MIN_PASSWORD_LENGTH:
        from gpupool.domain import ValidationError

        raise ValidationError(
            f"passwords need at least {MIN_PASSWORD_LENGTH} characters", "password"
        )
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    """True if `password` matches; False for a missing hash (spends the same time)."""
    try:
        return _hasher.verify(password_hash or _DUMMY_HASH, password) and bool(password_hash)
    except (VerificationError, InvalidHashError):
        return False


def new_token() -> tuple[str, str, str]:
    """A fresh token: (id, secret shown once to the user, sha256 of the secret to store)."""
    token_id = secrets.token_hex(6)
    secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return token_id, secret, hash_token(secret)


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
