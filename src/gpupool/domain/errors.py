"""Domain errors. Each carries a message that says what is wrong and what to do."""


class DomainError(Exception):
    """Base class for errors raised by domain rules."""


class ValidationError(DomainError):
    """A value breaks a domain rule. `field` names the offending field when known."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


class IllegalTransition(DomainError):
    """A workload state change that the transition table does not allow."""
