"""The two kinds of failure every eru decision can end in.

`InvalidInput` means the caller asked for something malformed (exit 2 in `eru plan`, an `error` reply on the bus), and
`NotFound` that it named something that does not exist;
`PlanningFailure` means a valid request that cannot be satisfied (exit 1), always with the numbers behind it.
"""

from __future__ import annotations

from typing import Any


class EruError(Exception):
    """Base of eru's own errors: a machine-readable code, a readable message and the numbers behind it."""

    code: str = "error"

    def __init__(self, message: str, *, code: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.details: dict[str, Any] = details

    def to_dict(self) -> dict[str, Any]:
        """The error as `{"code", "message", ...details}`, the shape given in docs/planning.md and of bus error
        replies."""
        return {"code": self.code, "message": self.message, **self.details}


class InvalidInput(EruError):
    """Malformed input: names the field and the reason."""

    code = "invalid_input"

    def __init__(self, field: str, reason: str, **details: Any) -> None:
        super().__init__(f"{field}: {reason}", field=field, **details)
        self.field = field
        self.reason = reason


class NotFound(InvalidInput):
    """The thing a request names by its id (a container, deploy, decision, node, tenant, dead letter) does not exist.
    Still invalid input (the caller named it), with its own code so that a client can tell it apart (`eru` exits 4,
    docs/cli.md "Exit codes"; the console answers 404)."""

    code = "not_found"


class PlanningFailure(EruError):
    """A valid request that cannot be satisfied; `code` says which rule or resource was short."""

    code = "insufficient_resource"


class PermissionDenied(EruError):
    """The caller's credentials do not allow this: another tenant's container, or a verb kept for operators."""

    code = "permission_denied"


class StoreUnavailable(EruError):
    """PostgreSQL cannot be reached (refused, timed out, unknown host, no socket file, bad credentials, no such
    database): whatever failed while connecting, at startup or when the pool opens a connection later.

    Raised at the pool's seam (`eru.store.pool`); defined here so that the retry classification (`eru.retry`) and
    the bus know it without importing the store."""

    code = "store_unavailable"
