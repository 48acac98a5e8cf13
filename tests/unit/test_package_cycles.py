"""Package dependencies, checked on the source (docs/architecture.md "Package dependencies"): no two packages import
each other, directly or round a longer loop, and no production module imports `eru.testing` (fakes and pytest
plugins only).

A package is a subpackage or top-level module of libs/eru (`eru.bus`, `eru.store`, `eru.errors`, …) or a service's
package (`eru_allocator`, …). Every import counts: module-level, inside a function, under `TYPE_CHECKING`.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIB = ROOT / "libs" / "eru"
SERVICES = {
    "eru_allocator": ROOT / "services" / "allocator" / "eru_allocator",
    "eru_distributor": ROOT / "services" / "distributor" / "eru_distributor",
    "eru_node_agent": ROOT / "services" / "node-agent" / "eru_node_agent",
    "eru_eviction": ROOT / "services" / "eviction" / "eru_eviction",
}
TESTING = "eru.testing"

Edges = dict[tuple[str, str], list[str]]


def packages(lib: Path, services: Mapping[str, Path]) -> dict[str, Path]:
    """Dotted package name → its directory or module file."""
    found: dict[str, Path] = {}
    for entry in sorted(lib.iterdir()):
        if entry.is_dir() and (entry / "__init__.py").is_file():
            found[f"{lib.name}.{entry.name}"] = entry
        elif entry.suffix == ".py" and not entry.name.startswith("__"):
            found[f"{lib.name}.{entry.stem}"] = entry
    found.update(services)
    return found


def module_files(package: str, base: Path) -> Iterator[tuple[str, Path]]:
    """(dotted module, file) for every module of a package."""
    if base.is_file():
        yield package, base
        return
    for path in sorted(base.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        parts = [part for part in path.relative_to(base).with_suffix("").parts if part != "__init__"]
        yield ".".join([package, *parts]), path


def imports(module: str, path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted name) for every import of a file, relative ones resolved; `from m import x` yields `m` and
    `m.x` (x may be a submodule)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            yield node.lineno, source
            for alias in node.names:
                yield node.lineno, f"{source}.{alias.name}"


def owner(name: str, known: Mapping[str, Path]) -> str | None:
    """The package a dotted name belongs to, None for a name outside them (the standard library, a dependency)."""
    return next((package for package in known if name == package or name.startswith(package + ".")), None)


def package_edges(known: Mapping[str, Path], root: Path) -> Edges:
    """(importer, imported) package pairs, each with where the imports are (`path:line name`, one per line)."""
    edges: Edges = {}
    for package, base in known.items():
        for module, path in module_files(package, base):
            for line, name in imports(module, path):
                target = owner(name, known)
                if target is not None and target != package:
                    place = f"{path.relative_to(root)}:{line}"
                    found = edges.setdefault((package, target), [])
                    if not any(where.startswith(place + " ") for where in found):
                        found.append(f"{place} {name}")
    return edges


def cycles(edges: Edges) -> list[list[str]]:
    """The strongly connected components of more than one package (Tarjan), each sorted."""
    graph: dict[str, list[str]] = {}
    for source, target in edges:
        graph.setdefault(source, []).append(target)
        graph.setdefault(target, [])
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def describe(component: list[str], edges: Edges) -> str:
    lines = [" ⇄ ".join(component)]
    for (source, target), where in sorted(edges.items()):
        if source in component and target in component:
            lines.append(f"  {source} → {target}: {'; '.join(where[:3])}")
    return "\n".join(lines)


def test_no_two_packages_import_each_other() -> None:
    known = packages(LIB, SERVICES)
    assert {"eru.bus", "eru.store", "eru.stack", "eru.cli", "eru_allocator"} <= set(known)
    edges = package_edges(known, ROOT)
    assert ("eru_allocator", "eru.store") in edges  # the graph sees real imports
    found = cycles(edges)
    assert not found, "packages that import each other:\n" + "\n".join(describe(c, edges) for c in found)


def test_no_production_module_imports_eru_testing() -> None:
    known = packages(LIB, SERVICES)
    edges = package_edges(known, ROOT)
    offences = [where for (source, target), found in sorted(edges.items()) if target == TESTING for where in found]
    offences = [where for where in offences if not where.startswith("libs/eru/testing/")]
    assert not offences, "production code imports eru.testing:\n" + "\n".join(offences)


def test_the_checker_finds_a_loop_through_function_and_relative_imports(tmp_path: Path) -> None:
    lib = tmp_path / "eru"
    for package in ("alpha", "beta", "testing"):
        (lib / package).mkdir(parents=True)
        (lib / package / "__init__.py").write_text("")
    (lib / "alpha" / "one.py").write_text("from eru.beta import two\n")
    (lib / "beta" / "two.py").write_text("def late() -> None:\n    from ..gamma import three\n")
    (lib / "gamma.py").write_text("from .alpha.one import x\nfrom eru import testing\n")
    known = packages(lib, {})
    edges = package_edges(known, tmp_path)
    assert cycles(edges) == [["eru.alpha", "eru.beta", "eru.gamma"]]
    assert edges[("eru.gamma", TESTING)] == ["eru/gamma.py:2 eru.testing"]
    assert edges[("eru.beta", "eru.gamma")] == ["eru/beta/two.py:2 eru.gamma"]
