"""`eru plan [FILE|-] [--json]`: solve one JSON planning problem (docs/planning.md) without any running service.

Exit 0 with the answer on stdout; exit 1 with `{"error": {...}}` on stdout for a planning failure; exit 2 for invalid
input (including malformed or too deeply nested JSON): one readable line naming the field on stderr, or with `--json`
the error object `{"error": {"code": "invalid_input", "field", "message"}}` on stdout. Never a traceback: any
unexpected failure is reported the same way (code `plan_error`) and logged at debug level.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from eru.bounded import DecodeLimits, check_json_depth, check_shape, find_unencodable, unencodable
from eru.cli.app import app
from eru.cli.node_filter_options import ExcludeNodesOption, NodeLabelOption, NodesOption, node_filter
from eru.cli.output import Format, OutputOption, render
from eru.errors import InvalidInput, PlanningFailure

# A problem file may be far bigger than a bus message (thousands of nodes), but never deeper.
PLAN_LIMITS = DecodeLimits(max_body_bytes=256 << 20, max_depth=64, max_collection_length=1_000_000)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_problem(text: str) -> Any:
    """The JSON problem in `text`, within `PLAN_LIMITS`; anything else is `InvalidInput` on `problem`."""
    data = text.encode("utf-8", errors="surrogatepass")
    if len(data) > PLAN_LIMITS.max_body_bytes:
        raise InvalidInput("problem", f"{len(data)} bytes, above the limit of {PLAN_LIMITS.max_body_bytes}")
    try:
        check_json_depth(data, PLAN_LIMITS.max_depth)
    except InvalidInput as error:
        raise InvalidInput("problem", _without_setting(error.reason)) from None
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise InvalidInput(
            "problem", f"malformed JSON at line {error.lineno} column {error.colno}: {error.msg}"
        ) from None
    except (ValueError, RecursionError) as error:
        raise InvalidInput("problem", f"malformed JSON: {error}") from None
    try:
        check_shape(value, PLAN_LIMITS)
    except InvalidInput as error:
        raise InvalidInput("problem", _without_setting(error.reason)) from None
    if not text.isascii() or "\\u" in text:  # only a `\ud800` escape or an undecodable input byte makes one
        found = find_unencodable(value)
        if found is not None:
            raise InvalidInput(*found)
    return value


def _without_setting(reason: str) -> str:
    """The bus's reason without the bus setting it names (a problem file has fixed limits)."""
    return reason.split(" (limit bus.", 1)[0]


def read_problem(source: str) -> Any:
    """The JSON problem from a file or stdin (`-`); unreadable input is `InvalidInput`."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    except OSError as error:
        raise InvalidInput("file", f"cannot read {source}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise InvalidInput("file", f"{source} is not UTF-8 text") from None
    return parse_problem(text)


@dataclass(frozen=True)
class Outcome:
    """What `eru plan` prints and how it exits."""

    code: int
    stdout: str = ""
    stderr: str = ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def plan_outcome(text: str | None, *, as_json: bool = False, indent: int | None = None, problem: Any = None) -> Outcome:
    """Solve the problem in `text` (or the already-read `problem`) and say what to print; never raises."""
    from eru.plan_api import solve

    try:
        answer = solve(parse_problem(text) if text is not None else problem)
    except InvalidInput as error:
        return _invalid(error.code, error.field, error.message, as_json, indent)
    except PlanningFailure as error:
        return Outcome(1, json.dumps({"error": error.to_dict()}, indent=indent, ensure_ascii=False))
    except Exception as error:  # a bug must still end in one line, never a traceback
        import structlog  # only on this rare path: the CLI starts without it (docs/cli.md, "Fast start")

        structlog.get_logger().debug("plan.unexpected_error", error=repr(error), exc_info=True)
        message = f"problem: could not be solved: {type(error).__name__}: {_one_line(str(error))[:300]}"
        return _invalid("plan_error", "problem", message, as_json, indent)
    return Outcome(0, json.dumps(answer, indent=indent, ensure_ascii=False))


def _invalid(code: str, field: str, message: str, as_json: bool, indent: int | None) -> Outcome:
    if as_json:
        error = {"code": code, "field": field, "message": _one_line(message)}
        return Outcome(2, json.dumps({"error": error}, indent=indent, ensure_ascii=False))
    return Outcome(2, stderr=f"error: {_one_line(message)}")


@app.command()
def plan(
    source: Annotated[str, typer.Argument(help="Problem file, or - for stdin.", metavar="[FILE|-]")] = "-",
    pretty: Annotated[bool, typer.Option("--pretty", help="Indent the JSON answer.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Invalid input as an error object on stdout instead of a line on stderr.")
    ] = False,
    output: OutputOption = Format.text,
    nodes: NodesOption = None,
    exclude_nodes: ExcludeNodesOption = None,
    node_label: NodeLabelOption = None,
) -> None:
    """Solve a planning problem (deploy, capacity, realloc, evict, drf): JSON in, JSON out; exit 0, 1 or 2. -o json
    is --json; -o yaml prints the answer (or the error object) as YAML. The node filter options set a deploy
    problem's `node_filter` (docs/planning.md "Nodes left out")."""
    as_json = as_json or output is not Format.text
    indent = 2 if pretty else None
    spec = node_filter(nodes, exclude_nodes, node_label)
    try:
        problem = read_problem(source)
        if spec is not None:
            problem = with_filter(problem, spec)
        outcome = plan_outcome(None, as_json=as_json, indent=indent, problem=problem)
    except InvalidInput as error:
        outcome = _invalid(error.code, error.field, error.message, as_json, indent)
    if outcome.stdout:
        typer.echo(_writable(render(json.loads(outcome.stdout), output) if output is Format.yaml else outcome.stdout))
    if outcome.stderr:
        typer.echo(_writable(outcome.stderr), err=True)
    raise typer.Exit(outcome.code)


def with_filter(problem: Any, spec: dict[str, Any]) -> Any:
    """A deploy problem with its `node_filter` set from the options (refused for any other kind)."""
    if not isinstance(problem, dict) or problem.get("kind", "deploy") != "deploy":
        raise InvalidInput("node_filter", "--nodes, --exclude-nodes and --node-label filter deploy problems only")
    return {**problem, "node_filter": spec}


def _writable(text: str) -> str:
    """`text` as it can be written (input with a lone surrogate is refused before this; a message quoting one gets
    it as `\\ud800`, never a UnicodeEncodeError)."""
    if unencodable(text) is None:
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
