"""The allocator's shape (docs/allocator.md): sub-packages that name the design, no import cycle between them, no
mixins. Read from the source with `ast` (nothing is imported): module-level imports, imports inside functions and
`TYPE_CHECKING` blocks all count."""

from __future__ import annotations

import ast
from pathlib import Path

import eru_allocator

PACKAGE = Path(eru_allocator.__file__).parent
TOP_LEVEL = {"__init__.py", "__main__.py", "app.py", "settings.py"}


def _modules() -> dict[str, ast.Module]:
    """Every module of the package by dotted name (`eru_allocator.deploy.pipeline`), parsed."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return found


def _imported(module: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The package's modules `module` imports anywhere in its body (`from eru_allocator.x import y` names module
    `eru_allocator.x.y` when that is a module, else `eru_allocator.x`)."""
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the importing module's package
                anchor = module.split(".")[: -node.level]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {target for target in targets if target in known and target != module}


def _top(module: str) -> str:
    """The sub-package a module belongs to (`deploy` for `eru_allocator.deploy.pipeline`), or its own name at the
    top level."""
    return module.split(".")[1] if "." in module else module


def _package_graph(modules: dict[str, ast.Module]) -> dict[str, set[str]]:
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, tree in modules.items():
        if "." not in name:
            continue
        source = _top(name)
        for target in _imported(name, tree, known):
            if "." in target and _top(target) != source:
                graph.setdefault(source, set()).add(_top(target))
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as its path (first node repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_top_level_holds_only_the_app_its_entry_point_and_settings() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in TOP_LEVEL)
    assert loose == [], f"modules beside app.py at the top of eru_allocator (move them into a sub-package): {loose}"
    packages = [p for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__"]
    assert packages, "eru_allocator has no sub-packages"
    assert all((p / "__init__.py").is_file() for p in packages)


def test_no_import_cycle_between_sub_packages() -> None:
    graph = _package_graph(_modules())
    assert _cycle(graph) is None, f"sub-packages import each other: {' → '.join(_cycle(graph) or [])}"


def test_no_class_has_more_than_one_allocator_base() -> None:
    modules = _modules()
    classes = {
        (name, node.name) for name, tree in modules.items() for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
    }
    class_names = {cls for _, cls in classes}
    mixed = []
    for name, tree in modules.items():
        local = {
            alias.asname or alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("eru_allocator")
            for alias in node.names
        } | {cls for module, cls in classes if module == name}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [_base_name(base) for base in node.bases]
                own = [base for base in bases if base in local and base in class_names]
                if len(own) > 1:
                    mixed.append(f"{name}.{node.name}({', '.join(own)})")
    assert mixed == [], f"classes built from several allocator classes (hold the parts instead): {mixed}"


def _base_name(base: ast.expr) -> str:
    """`Consumer` for `Consumer`, `Consumer[ModelT]` and `module.Consumer`."""
    if isinstance(base, ast.Subscript):
        base = base.value
    if isinstance(base, ast.Attribute):
        return base.attr
    return base.id if isinstance(base, ast.Name) else ""


def test_the_checks_find_what_they_are_for() -> None:
    """The cycle finder and the graph builder catch a cycle and a function-level import."""
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}}) is None
    tree = ast.parse("def f():\n    from eru_allocator.b import thing\n")
    assert _imported("eru_allocator.a.m", tree, {"eru_allocator.b", "eru_allocator.a.m"}) == {"eru_allocator.b"}
