"""Shared schema base classes and the rules every request body follows.

Every request body is an `In`: unknown fields are refused, numbers must be finite (no
`Infinity` or `NaN`, which Python's JSON parser accepts), and no string anywhere in it (list
items and mapping keys included) may hold a NUL byte: no program can receive one and
PostgreSQL cannot store one. Each is a 422 naming the field.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

NUL = "\x00"
#: The largest whole number the database's integer columns hold (PostgreSQL's `integer`);
#: a bound above it would be a 500 there instead of a 422.
INT32_MAX = (1 << 31) - 1


def _find_nul(value: Any, path: str) -> str | None:
    """The path (`command[1]`, `labels['k']`) of the first string in `value` holding a NUL."""
    if isinstance(value, str):
        return path if NUL in value else None
    if isinstance(value, list | tuple | set | frozenset):
        for i, item in enumerate(value):
            found = _find_nul(item, f"{path}[{i}]")
            if found:
                return found
    elif isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and NUL in k:
                return f"{path} (a key)"
            found = _find_nul(v, f"{path}[{k!r}]")
            if found:
                return found
    return None


def refuse_nul(value: Any, name: str) -> Any:
    """Return `value`, or raise a validation error naming where it holds a NUL byte."""
    where = _find_nul(value, name)
    if where is not None:
        raise PydanticCustomError(
            "nul_byte", "{where} contains a NUL byte (\\u0000); remove it", {"where": where}
        )
    return value


class In(BaseModel):
    """Request bodies: unknown fields are refused (422 naming the field); so are NUL bytes in
    any string and non-finite numbers (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any, info: ValidationInfo) -> Any:
        return refuse_nul(value, info.field_name or "value")


class Out(BaseModel):
    """Response bodies."""

    model_config = ConfigDict(from_attributes=True)
