"""Machine-readable output of the read verbs: `-o json|yaml` (or `--json`), one documented schema per verb.

Every document is an object with `schema` (`eru.cli/<verb>`) and `schema_version` first, then the verb's fields
(docs/cli.md, "JSON output"). A field is only ever added within a version; renaming or removing one bumps it.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer

SCHEMA_VERSION = 1


class Format(StrEnum):
    """How a read verb prints its answer."""

    text = "text"
    json = "json"
    yaml = "yaml"


OutputOption = Annotated[
    Format,
    typer.Option(
        "--output",
        "-o",
        envvar="ERU_OUTPUT",
        help="text (tables for people), json or yaml (stable schemas, docs/cli.md).",
        case_sensitive=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Same as -o json.")]


CELL_KEEP = 60
"""A table cell shows at most this many characters of a long value (then `… (N characters)`): a stored 120 KB
image must not make `eru container ls` 1,600 lines long (docs/cli.md "Limits"); `-o json` gives it whole."""


def cell(value: object, keep: int = CELL_KEEP) -> str:
    """A value for a table cell: as text, clipped to `keep` characters and its length."""
    from eru.bounded import clip

    return clip("" if value is None else str(value), keep)


def chosen(output: Format, as_json: bool) -> Format:
    """The format asked for: `--json` wins over `-o`."""
    return Format.json if as_json else output


def document(schema: str, **fields: Any) -> dict[str, Any]:
    """A versioned output document."""
    return {"schema": f"eru.cli/{schema}", "schema_version": SCHEMA_VERSION, **fields}


def to_plain(value: Any) -> Any:
    """JSON-ready data: integral floats stay floats here (the schema says which fields are numbers); datetimes and
    other objects become strings, never Python reprs of containers."""
    if isinstance(value, dict):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes):
        return value.hex()
    isoformat = getattr(value, "isoformat", None)
    if callable(isoformat):
        return isoformat()
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return to_plain(dump(mode="json"))
    return str(value)


def render(doc: Any, fmt: Format) -> str:
    """`doc` as JSON (indented) or YAML (block style, keys in their order)."""
    plain = to_plain(doc)
    if fmt is Format.yaml:
        import yaml

        return str(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, default_flow_style=False)).rstrip()
    return json.dumps(plain, indent=2, ensure_ascii=False)


def emit(doc: Any, fmt: Format) -> None:
    """Print `doc` in `fmt` (json or yaml) to stdout."""
    sys.stdout.write(render(doc, fmt) + "\n")
    sys.stdout.flush()


def emit_line(doc: Any, fmt: Format) -> None:
    """One document of a stream (`events tail`, `deploy watch`, `logs -o json`): a JSON line, or a YAML document
    opened by `---`."""
    if fmt is Format.yaml:
        sys.stdout.write("---\n" + render(doc, fmt) + "\n")
    else:
        sys.stdout.write(json.dumps(to_plain(doc), ensure_ascii=False) + "\n")
    sys.stdout.flush()


def operation_document(schema: str, reply: Any, **fields: Any) -> dict[str, Any]:
    """The document of a verb that changes something (`container rm`, `node cordon`, `tenant set` …): the service's
    message, its warnings and the rows it answered (docs/cli.md, "Output formats and schemas")."""
    rows = list(getattr(reply, "rows", []) or [])
    warnings = list(getattr(reply, "warnings", []) or [])
    return document(schema, message=getattr(reply, "message", ""), warnings=warnings, rows=rows, **fields)


def table_document(table: Any) -> dict[str, Any]:
    """A rich table as data: its title and one object per row (header → cell; a cell that is a number becomes a
    JSON number, markup is dropped). For verbs whose answer is a table of figures (`eru sim …`)."""
    from rich.text import Text

    def plain(cell: Any) -> Any:
        text = cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain
        for kind in (int, float):
            try:
                return kind(text)
            except ValueError:
                continue
        return text

    headers = [plain(column.header) for column in table.columns]
    columns = [[plain(cell) for cell in column.cells] for column in table.columns]
    rows = [{str(header): column[index] for header, column in zip(headers, columns, strict=True)}
            for index in range(table.row_count)]  # fmt: skip
    title = table.title.plain if isinstance(table.title, Text) else table.title
    return {"title": title, "rows": rows}
