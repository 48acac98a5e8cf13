"""No allocator module outside `eru_allocator/store/` reaches past the store seam (docs/allocator.md "The store seam"):
none reads a pod session's connection (`session.conn`) or a store's pool (`store.pool`) to run statements of its own
(the admission pass once did both: `PgPodSession.conn` for the queue's writes, `PgStore.pool` for its LISTEN
connection). Read from the source with `ast` (nothing is imported)."""

from __future__ import annotations

import ast
from pathlib import Path

import eru_allocator

PACKAGE = Path(eru_allocator.__file__).parent
STORE = PACKAGE / "store"


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
