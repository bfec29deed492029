"""Shared schema base classes."""

from pydantic import BaseModel, ConfigDict


class In(BaseModel):
    """Request bodies: unknown fields are refused (422 naming the field)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class Out(BaseModel):
    """Response bodies."""

    model_config = ConfigDict(from_attributes=True)
