"""Errors of the bus: every one is an `EruError`, so services print one line and the CLI exits with a clear code."""

from __future__ import annotations

from typing import Any

from eru.errors import EruError


class BusError(EruError):
    """Base of the bus's own failures."""

    code = "bus_error"


class BusUnavailable(BusError):
    """The NATS server cannot be reached (at connect time) or the connection is closed for good."""

    code = "bus_unavailable"


class RequestTimeout(BusError):
    """A request got no reply within its timeout."""

    code = "timeout"


class NoResponders(BusError):
    """A request was sent to a subject nobody serves."""

    code = "no_responders"


class RemoteError(BusError):
    """The responder answered with an error reply `{code, message, details}`; raised on the caller's side."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message, code=code, **(details or {}))

    def to_dict(self) -> dict[str, Any]:
        """The reply as the responder sent it."""
        return {"code": self.code, "message": self.message, "details": dict(self.details)}


class Retryable(Exception):
    """Raised by a handler for a transient failure: the message is redelivered after `delay` seconds (or backoff)."""

    def __init__(self, reason: str, *, delay: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.delay = delay


class Permanent(Exception):
    """Raised by a handler for a message that can never succeed: it is dead-lettered at once, never retried."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
