"""How every `eru` verb fails (docs/cli.md, "Exit codes" and "Errors"): one exit code per kind of failure, one error
type carrying the kind, one renderer.

With `-o json|yaml` a failure is the `eru.cli/error` document on stdout; otherwise one line `error: …` on stderr,
never wrapped or cut. Kept cheap to import (docs/cli.md, "Fast start"): rich and yaml only when printing.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from enum import StrEnum
from typing import Any

from eru.errors import EruError


class Kind(StrEnum):
    """What kind of failure ended a verb; each has its own exit code (`EXIT_CODES`)."""

    refused = "refused"  # a valid request that did not succeed: refused, conflict, partial deploy, unhealthy status
    invalid_input = "invalid_input"  # a bad option, argument or value; a request that would do nothing; no stack
    unavailable = "unavailable"  # a server could not be reached or did not answer in time
    not_found = "not_found"  # the id (container, deploy, decision, node, tenant, dead letter, …) names nothing
    internal = "internal"  # a bug: an unexpected error in eru itself
    interrupted = "interrupted"  # Ctrl-C


OK = 0
EXIT_CODES: dict[Kind, int] = {
    Kind.refused: 1,
    Kind.invalid_input: 2,
    Kind.unavailable: 3,
    Kind.not_found: 4,
    Kind.internal: 5,
    Kind.interrupted: 130,
}
_KIND_OF_EXIT = {code: kind for kind, code in EXIT_CODES.items()}

# Error codes (of eru's own errors and of the services' error replies) → kind; any other code is `refused`.
_KIND_OF_CODE: dict[str, Kind] = {
    "invalid_input": Kind.invalid_input,
    "not_found": Kind.not_found,
    "not_recorded": Kind.not_found,
    "bus_unavailable": Kind.unavailable,
    "bus_error": Kind.unavailable,
    "timeout": Kind.unavailable,
    "no_responders": Kind.unavailable,
    "unavailable": Kind.unavailable,
    "store_unavailable": Kind.unavailable,
    "console_unavailable": Kind.unavailable,
    "handler_error": Kind.internal,
    "internal": Kind.internal,
}


def kind_of(code: str) -> Kind:
    """The kind of failure an error code stands for."""
    return _KIND_OF_CODE.get(code, Kind.refused)


class CliError(EruError):
    """A verb's failure: its kind (which sets the exit code), a readable message, the field to blame if any, and the
    error code and details of the error behind it."""

    def __init__(
        self, kind: Kind, message: str, *, field: str | None = None, code: str | None = None, **details: Any
    ) -> None:
        super().__init__(message, code=code or str(kind), **details)
        self.kind = kind
        self.field = field

    @property
    def exit_code(self) -> int:
        """The exit code of its kind."""
        return EXIT_CODES[self.kind]

    @classmethod
    def of(cls, error: BaseException) -> CliError:
        """Any exception as a `CliError`: eru's own by their code, anything else `internal`."""
        if isinstance(error, CliError):
            return error
        if type(error).__name__ == "ValidationError":  # pydantic's, building a request from options: bad input
            from eru.settings import describe_validation_error

            error = describe_validation_error(error)  # type: ignore[arg-type]
        if isinstance(error, EruError):
            details = {k: v for k, v in error.details.items() if k != "field"}
            field = getattr(error, "field", None) or error.details.get("field")
            message, field = as_typed(error.message, field if isinstance(field, str) else None)
            return cls(kind_of(error.code), message, field=field, code=error.code, **details)
        text = " ".join(str(error).split())[:300]
        return cls(Kind.internal, f"unexpected {type(error).__name__}: {text}" if text else type(error).__name__)


# The running verb's request fields → its options and arguments as the user typed them (`typed_as`).
_TYPED: ContextVar[Mapping[str, str] | None] = ContextVar("eru_cli_typed", default=None)
_INDEX = re.compile(r"\[\d+\]$")


def typed_as(options: Mapping[str, str]) -> None:
    """Name the running verb's failures as the user typed them: `options` maps the field paths of its request to its
    options and arguments (`{"weight": "--weight", "container_ids": "CONTAINER_IDS"}`), so that a refusal naming a
    field — by the verb's own checks or in a service's reply — names the option instead (docs/cli.md "Limits")."""
    _TYPED.set(dict(options))


def option_of(field: str, options: Mapping[str, str]) -> str | None:
    """The option behind a field path: the longest mapped prefix wins, a list index falls back to its list
    (`workload.command[2]` → `workload.command`, `container_ids[0]` → `container_ids`)."""
    parts = field.split(".")
    for end in range(len(parts), 0, -1):
        key = ".".join(parts[:end])
        for candidate in (key, _INDEX.sub("", key)):
            if candidate in options:
                return options[candidate]
    return None


def as_typed(message: str, field: str | None, options: Mapping[str, str] | None = None) -> tuple[str, str | None]:
    """(message, field) with the field renamed to the option behind it (`typed_as`, or `options`): `weight:
    expected a number` → `--weight: expected a number`; unchanged when no option maps it."""
    options = _TYPED.get() if options is None else options
    option = option_of(field, options) if field and options else None
    if option is None or field is None:
        return message, field
    head = f"{field}: "
    return (option + ": " + message[len(head) :] if message.startswith(head) else f"{option}: {message}"), option


def kind_of_exit(code: int) -> Kind:
    """The kind an exit code of the table stands for (`refused` for any other non-zero code)."""
    return _KIND_OF_EXIT.get(code, Kind.refused)


def error_document(error: CliError) -> dict[str, Any]:
    """The `eru.cli/error` document (docs/cli.md, "Errors")."""
    from eru.bounded import clip
    from eru.cli.output import document
    from eru.redaction import redact_text

    body: dict[str, Any] = {
        "kind": str(error.kind),
        "code": error.code,
        "message": clip(redact_text(error.message), MESSAGE_MAX),
        "field": error.field,
        "exit_code": error.exit_code,
    }
    if error.details:
        body["details"] = error.details
    return document("error", error=body)


MESSAGE_MAX = 1000
"""An error line is cut after this many characters (the value it quotes is clipped already, docs/cli.md "Limits")."""


def report(error: CliError, fmt: Any) -> int:
    """Print `error` as the document on stdout (`fmt` json or yaml) or as one line on stderr; its exit code."""
    from eru.cli.output import Format, emit

    if fmt in (Format.json, Format.yaml):
        emit(error_document(error), Format(fmt))
        return error.exit_code
    from eru.bounded import clip
    from eru.redaction import redact_text

    # one line, whatever the message held, and short however long the value behind it: rich or a terminal would
    # wrap a 120 KB word for minutes (clip also makes a lone surrogate printable; docs/cli.md "Limits")
    line = clip(" ".join(redact_text(error.message).split()), MESSAGE_MAX)
    with_colour = sys.stderr.isatty() and not os.environ.get("NO_COLOR")
    sys.stdout.flush()
    sys.stderr.write(f"\x1b[1;31merror:\x1b[0m {line}\n" if with_colour else f"error: {line}\n")
    sys.stderr.flush()
    return error.exit_code


def format_in_context() -> Any:
    """The `-o` asked for on the running command (and `--json`), from click's context; text when there is none."""
    from typer._click.globals import get_current_context  # typer's own click

    from eru.cli.output import Format

    ctx = get_current_context(silent=True)
    while ctx is not None:
        if ctx.params.get("as_json"):
            return Format.json
        output = ctx.params.get("output")
        if output is not None:
            return Format(output)
        ctx = ctx.parent
    return Format.text


def format_in_args(args: Sequence[str]) -> Any:
    """The `-o` a command line asks for (`-o json`, `-ojson`, `--output=yaml`, `--json`), else `ERU_OUTPUT`: for a
    failure before any verb ran (a usage error) or after it (an unexpected exception)."""
    from eru.cli.output import Format

    value = os.environ.get("ERU_OUTPUT", "text")
    for index, arg in enumerate(args):
        if arg == "--":
            break
        if arg == "--json":
            return Format.json
        if arg in ("-o", "--output") and index + 1 < len(args):
            value = args[index + 1]
        elif arg.startswith("--output="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            value = arg[2:]
    try:
        return Format(value.lower())
    except ValueError:
        return Format.text
