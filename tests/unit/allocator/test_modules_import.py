"""Every allocator module imports (mypy passed a name `eru.domain` does not export; importing catches it)."""

from __future__ import annotations

import importlib
import pkgutil

import eru_allocator


def test_every_allocator_module_imports() -> None:
    names = [info.name for info in pkgutil.walk_packages(eru_allocator.__path__, "eru_allocator.")]
    assert "eru_allocator.app" in names
    for name in names:
        importlib.import_module(name)
