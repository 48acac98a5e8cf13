"""No allocator module outside `eru_allocator/store/` reaches past the store seam (docs/allocator.md "The store seam"):
none reads a pod session's connection (`session.conn`) or a store's pool (`store.pool`) to run statements of its own
(the admission pass once did both: `PgPodSession.conn` for the queue's writes, `PgStore.pool` for its LISTEN
connection), and none but `app.py` (which opens the PostgreSQL stores over the runner's pool) imports asyncpg or the
store's connection and transaction (`eru.store.transaction`: `Connection`, `transaction`). Read from the source with
`ast` (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import eru_allocator

PACKAGE = Path(eru_allocator.__file__).parent
STORE = PACKAGE / "store"
APP = PACKAGE / "app.py"
"""Builds the PostgreSQL stores over the pool the service runner opens: the one module besides `store/` that may."""
PAST_THE_SEAM = frozenset({"Connection", "transaction"})
"""What `eru.store.transaction` (and `eru.store`) offers for running statements of one's own."""


def reaches(tree: ast.Module) -> list[str]:
    """Lines reading `.conn` of anything, or `.pool` of something named like a store (`store`, `self.store`)."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = node.value
        owner_name = owner.id if isinstance(owner, ast.Name) else owner.attr if isinstance(owner, ast.Attribute) else ""
        if node.attr == "conn" or (node.attr == "pool" and owner_name.lstrip("_").endswith("store")):
            found.append((node.lineno, node.col_offset, ast.unparse(node)))
    return [f"{line}: {text}" for line, _, text in sorted(found)]


def _driver(module: str) -> bool:
    return module == "asyncpg" or module.startswith("asyncpg.")


def driver_imports(tree: ast.Module) -> list[str]:
    """Lines importing asyncpg (any part of it), or `Connection` or `transaction` from `eru.store` or
    `eru.store.transaction` (or that module itself)."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            hit = any(_driver(alias.name) or alias.name == "eru.store.transaction" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            names = {alias.name for alias in node.names}
            seam = node.module in ("eru.store", "eru.store.transaction") and bool(names & (PAST_THE_SEAM | {"*"}))
            hit = _driver(node.module) or seam
        else:
            continue
        if hit:
            found.append((node.lineno, ast.unparse(node)))
    return [f"{line}: {text}" for line, text in sorted(found)]


def test_the_import_finder_sees_the_driver_and_the_stores_connection() -> None:
    source = (
        "import asyncpg\n"
        "from asyncpg.pool import Pool\n"
        "from eru.store.transaction import Connection, OutboxMessage\n"
        "from eru.store import lock_pod, transaction\n"
        "import eru.store.transaction\n"
        "from eru.store.transaction import OutboxMessage\n"
        "from eru.store.queries import QueryStore\n"
    )
    assert driver_imports(ast.parse(source)) == [
        "1: import asyncpg",
        "2: from asyncpg.pool import Pool",
        "3: from eru.store.transaction import Connection, OutboxMessage",
        "4: from eru.store import lock_pod, transaction",
        "5: import eru.store.transaction",
    ]


def test_no_module_outside_the_store_and_app_imports_the_driver_or_the_stores_connection() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if STORE in path.parents or path == APP:
            continue
        found = driver_imports(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if found:
            offenders[path.relative_to(PACKAGE).as_posix()] = found
    assert offenders == {}, "take the store's protocols (eru.store.*), built over the pool in app.py"


def test_the_finder_sees_a_sessions_connection_and_a_stores_pool() -> None:
    tree = ast.parse("a = session.conn\nb = self.conn\nc = store.pool\nd = self._store.pool\ne = self.pool\n")
    assert reaches(tree) == ["1: session.conn", "2: self.conn", "3: store.pool", "4: self._store.pool"]


def test_no_module_outside_the_store_reaches_a_connection_or_a_stores_pool() -> None:
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if STORE in path.parents:
            continue
        found = reaches(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        if found:
            offenders[path.relative_to(PACKAGE).as_posix()] = found
    assert offenders == {}, "speak the store's verbs (eru.store.*) instead"
