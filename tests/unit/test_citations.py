"""Code and docs cite what ships with the project (`docs/…`, published papers by name), never the behaviour spec's
sections ("SPEC §2.1") or its source files ("seed 004"), which a reader of eru does not have (issue 14, "Layout")."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNSHIPPED = re.compile(r"SPEC\s*§|SPEC\.md|\bseed 00\d\b")
# Applied migrations are checksummed: their comments stay as written (tests/unit/test_migration_comment_edits.py).
APPLIED = "libs/eru/store/migrations/"


def _sources() -> list[Path]:
    found = [ROOT / "README.md"]
    for top in ("libs", "services", "bench", "docs"):
        found += [p for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".md", ".sql", ".toml")]
    return [p for p in found if APPLIED not in p.relative_to(ROOT).as_posix()]


def test_nothing_cites_the_spec_or_its_seeds() -> None:
    cited = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
        for path in _sources()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if UNSHIPPED.search(line)
    ]
    assert cited == []
