"""Code and docs cite what ships with the project (`docs/…`, published papers by name), never the behaviour spec's
sections ("SPEC §2.1") or its source files ("seed 004"), which a reader of eru does not have (issue 14, "Layout")."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UNSHIPPED = re.compile(r"SPEC\s*§|SPEC\.md|\bseed 00\d\b|\bthe seed's\b|\bas the seed\b")
# Applied migrations are checksummed: their comments stay as written (tests/unit/test_migration_comment_edits.py).
APPLIED = "libs/eru/store/migrations/"
TOPS = ("libs", "services", "bench", "docs")


def _sources() -> list[Path]:
    """The project's own files: what git tracks (not bench/out's worktrees of old commits an A/B run keeps), or
    without git every file under the project's folders but bench/out."""
    try:
        listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
        found = [ROOT / name for name in listed.splitlines()]
    except (OSError, subprocess.CalledProcessError):
        found = [p for top in TOPS for p in (ROOT / top).rglob("*") if "bench/out/" not in p.as_posix()]
    return [
        p
        for p in found
        if p.suffix in (".py", ".md", ".sql", ".toml")
        and (p.name == "README.md" or p.relative_to(ROOT).parts[0] in TOPS)
        and APPLIED not in p.relative_to(ROOT).as_posix()
        and p.is_file()
    ]


def test_nothing_cites_the_spec_or_its_seeds() -> None:
    cited = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
        for path in _sources()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if UNSHIPPED.search(line)
    ]
    assert cited == []
