"""The allocator's store seam (docs/allocator.md "The store seam"): every SQL statement of the allocator lives in
`eru_allocator/store/`, and no pool, connection or NATS client anywhere in libs/ or services/ is typed `Any`.

Read from the source with `ast` (nothing is imported). A module that still breaks a rule is named in an allowlist
below; the test fails on any offender not listed (a new one) and on any listed module that no longer offends (the
list only shrinks).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import eru_allocator

ROOT = Path(__file__).resolve().parents[3]
PACKAGE = Path(eru_allocator.__file__).parent
STORE = PACKAGE / "store"

# A string that is a SQL statement: an upper-case verb, then what that verb needs next.
SQL_TEXT = re.compile(
    r"^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\w+(\s+AS\s+\w+)?\s+SET\s|DELETE\s+FROM\s|WITH\s+\w+\s+AS\s*\(|"
    r"LOCK\s+TABLE\s|TRUNCATE\s)"
)
# asyncpg's verbs that run SQL: called on anything outside the store, they are a statement outside the store.
SQL_VERBS = {"fetch", "fetchrow", "fetchval", "execute", "executemany", "copy_records_to_table", "cursor"}
SEAM_NAMES = {"pool", "conn", "connection", "js", "nc", "client"}

# Modules of the allocator that still run SQL outside store/ (none left: the list only shrinks, and it is empty).
SQL_OUTSIDE_STORE_ALLOWED: set[str] = set()
# Parameters or attributes named like a pool, connection or NATS client and still typed `Any` (path from the root).
ANY_SEAM_ALLOWED: set[str] = set()


def _sql_offences(tree: ast.Module) -> list[str]:
    """Lines that hold SQL text or call an asyncpg verb, in line order."""
    parts = {id(value) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for value in node.values}
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in parts:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and SQL_TEXT.match(node.value):
            found.append((node.lineno, f"SQL text {node.value.strip().splitlines()[0][:40]!r}"))
        elif isinstance(node, ast.JoinedStr) and node.values:
            first = node.values[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and SQL_TEXT.match(first.value):
                found.append((node.lineno, f"SQL f-string {first.value.strip().splitlines()[0][:40]!r}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SQL_VERBS:
            found.append((node.lineno, f".{node.func.attr}(…)"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def sql_outside_store() -> dict[str, list[str]]:
    """Allocator module (relative path) → its SQL lines, for every module outside `store/`."""
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if STORE in path.parents:
            continue
        found = _sql_offences(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if found:
            offenders[path.relative_to(PACKAGE).as_posix()] = found
    return offenders


def _mentions_any(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return re.search(r"\bAny\b", annotation.value) is not None
    return any(
        (isinstance(node, ast.Name) and node.id == "Any") or (isinstance(node, ast.Attribute) and node.attr == "Any")
        for node in ast.walk(annotation)
    )


def _seam_name(name: str) -> bool:
    return name.lstrip("_") in SEAM_NAMES


def _any_offences(tree: ast.Module) -> list[str]:
    """Parameters and annotated attributes named like a seam and typed with `Any`, in source order."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and _seam_name(node.arg) and _mentions_any(node.annotation):
            found.append((node.lineno, node.col_offset, f"parameter {node.arg}"))
        elif isinstance(node, ast.AnnAssign) and _mentions_any(node.annotation):
            target = node.target
            name = (
                target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else ""
            )
            if _seam_name(name):
                found.append((node.lineno, node.col_offset, f"attribute {name}"))
    return [f"{line}: {what}" for line, _, what in sorted(found)]


def any_typed_seams() -> dict[str, list[str]]:
    """File (relative to the repository) → its pools, connections and clients typed `Any`, in libs/ and services/."""
    offenders = {}
    for top in ("libs", "services"):
        for path in sorted((ROOT / top).rglob("*.py")):
            found = _any_offences(ast.parse(path.read_text(encoding="utf-8"), str(path)))
            if found:
                offenders[path.relative_to(ROOT).as_posix()] = found
    return offenders


def test_the_counter_finds_sql_text_and_asyncpg_calls() -> None:
    tree = ast.parse(
        'Q = "SELECT 1"\nasync def f(conn):\n    await conn.fetchrow(Q)\n    x = f"UPDATE nodes SET a = {1}"\n'
        'DOC = "Select the nodes: not SQL"\n'
    )
    assert [line.split(":")[0] for line in _sql_offences(tree)] == ["1", "3", "4"]


def test_the_counter_finds_seams_typed_any() -> None:
    tree = ast.parse(
        "def f(nc: Any, pool: Any | None, js: JetStreamContext, conn: 'Any') -> None:\n"
        "    self._client: Any = None\n    rows: Any = 1\n"
    )
    assert [line.split(": ", 1)[1] for line in _any_offences(tree)] == [
        "parameter nc",
        "parameter pool",
        "parameter conn",
        "attribute _client",
    ]


def test_no_sql_outside_the_allocators_store_but_the_listed_modules() -> None:
    offenders = sql_outside_store()
    new = {module: lines for module, lines in offenders.items() if module not in SQL_OUTSIDE_STORE_ALLOWED}
    assert new == {}, "SQL outside eru_allocator/store/: move it behind a store capability"
    assert SQL_OUTSIDE_STORE_ALLOWED - set(offenders) == set(), "no SQL left there: drop it from the allowlist"


def test_no_pool_connection_or_client_is_typed_any() -> None:
    offenders = any_typed_seams()
    new = {path: lines for path, lines in offenders.items() if path not in ANY_SEAM_ALLOWED}
    assert new == {}, "type it: asyncpg.Pool, eru.store.transaction.Connection, nats Client or JetStreamContext"
    assert ANY_SEAM_ALLOWED - set(offenders) == set(), "nothing typed Any left there: drop it from the allowlist"
