"""The package rules of DEVELOPERS.md, checked on the source: services import only `eru`, never each other, and the
pure decision modules import no I/O library and no clock."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = {
    "allocator": "eru_allocator",
    "distributor": "eru_distributor",
    "node-agent": "eru_node_agent",
    "eviction": "eru_eviction",
}
PURE = [
    "planning",
    "colocation",
    "fairness",
    "domain",
    "units.py",
    "errors.py",
    "plan_api.py",
    "podsecurity.py",
    "nodeagent",
    "reconcile.py",
    "replay.py",
    "decision_view.py",
    "decision_answer.py",
    "natsconf.py",
    "console/auth.py",
    "console/views.py",
    "compose/topology.py",
]
IMPURE_ROOTS = {"nats", "asyncpg", "aiodocker", "aiohttp", "asyncio", "socket", "subprocess", "time", "docker"}
IMPURE_ERU = ("eru.bus", "eru.store", "eru.service", "eru.cli", "eru.testing")


def imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """(line, dotted module) for every import in a file; relative imports are resolved against its package."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                yield node.lineno, "." * node.level + (node.module or "")
            elif node.module:
                yield node.lineno, node.module


def python_files(base: Path) -> list[Path]:
    return sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("service", sorted(SERVICES))
def test_services_import_libs_never_each_other(service: str) -> None:
    own = SERVICES[service]
    others = {pkg for name, pkg in SERVICES.items() if name != service}
    files = python_files(ROOT / "services" / service)
    assert files, f"no source found for service {service}"
    offences = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in files
        for line, module in imported_modules(path)
        if module.split(".")[0] in others
    ]
    assert not offences, "\n".join(offences)
    assert any(module.split(".")[0] == own for path in files for _, module in imported_modules(path))


def pure_files() -> list[Path]:
    base = ROOT / "libs" / "eru"
    files: list[Path] = []
    for entry in PURE:
        target = base / entry
        if target.is_dir():
            files.extend(python_files(target))
        elif target.exists():
            files.append(target)
    return files


def test_pure_modules_import_no_io_and_no_clock() -> None:
    files = pure_files()
    assert len(files) >= 3
    offences = []
    for path in files:
        for line, module in imported_modules(path):
            root = module.split(".")[0]
            if root in IMPURE_ROOTS or module.startswith(IMPURE_ERU) or module == "datetime":
                offences.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    assert not offences, "pure modules must not do I/O or read the clock:\n" + "\n".join(offences)


def test_the_checker_sees_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import asyncpg\nfrom eru.bus.codec import encode\nfrom . import sibling\n")
    assert [module for _, module in imported_modules(sample)] == ["asyncpg", "eru.bus.codec", "."]
