"""Store errors. The API maps NotFound to 404 and Conflict to 409."""

from gpupool.domain import DomainError


class NotFound(DomainError):
    """The thing asked for does not exist. The message names it and says how to list them."""


class Conflict(DomainError):
    """The change clashes with what is stored (duplicate name, still in use, raced)."""
