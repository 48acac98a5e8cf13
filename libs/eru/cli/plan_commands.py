"""`eru plan [FILE|-]`: solve one JSON planning problem (SPEC §10) without any running service.

Exit 0 with the answer on stdout; exit 1 with `{"error": {...}}` on stdout for a planning failure; exit 2 with one
readable line on stderr for invalid input (including malformed JSON).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from eru.cli.app import app
from eru.errors import InvalidInput, PlanningFailure


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def read_problem(source: str) -> Any:
    """The JSON problem from a file or stdin (`-`); unreadable input is `InvalidInput`."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidInput("file", f"cannot read {source}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise InvalidInput("file", f"{source} is not UTF-8 text") from None
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise InvalidInput(
            "problem", f"malformed JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except ValueError as error:
        raise InvalidInput("problem", f"malformed JSON: {error}") from None


@app.command()
def plan(
    source: Annotated[str, typer.Argument(help="Problem file, or - for stdin.", metavar="[FILE|-]")] = "-",
    pretty: Annotated[bool, typer.Option("--pretty", help="Indent the JSON answer.")] = False,
) -> None:
    """Solve a planning problem (deploy, capacity, realloc, evict, drf): JSON in, JSON out; exit 0, 1 or 2."""
    from eru.plan_api import solve

    indent = 2 if pretty else None
    try:
        answer = solve(read_problem(source))
    except InvalidInput as error:
        typer.echo(f"error: {error.message}", err=True)
        raise typer.Exit(2) from None
    except PlanningFailure as error:
        typer.echo(json.dumps({"error": error.to_dict()}, indent=indent, ensure_ascii=False))
        raise typer.Exit(1) from None
    typer.echo(json.dumps(answer, indent=indent, ensure_ascii=False))
