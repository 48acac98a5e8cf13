"""docs/ is a reference, not a lab journal (issue 38): no dated headings and no commit hashes in any docs/*.md
(history lives in git and CHANGELOG.md), and a code or docs citation `docs/<page>.md "<heading>"` of the pages
rewritten as references names a heading that exists.

A commit hash is a word of 7–40 hex digits with at least one digit and one letter a–f. Not hashes, and left out:
UUIDs and their shortened forms as eru prints them (`01a20ef5-b1f8-79df-80be-becc06c018f5`, `01a205f1-0218-…`:
eight hex digits followed by groups joined with `-`). Words of hex digits only or hex letters only (`1073741824`,
`accede`) are not hashes by the digit-and-letter rule.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("**/*.md"))
DATED_HEADING = re.compile(r"^#{1,6} .*\b20\d\d-\d\d")
HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")
UUID_LIKE = re.compile(r"\b[0-9a-f]{8}(?:-(?:[0-9a-f]{1,12}|…))+")
# The pages written as references (performance, rewritten from a journal; testing): citations of them are checked.
CHECKED_PAGES = ("performance", "testing")
CITATION = re.compile(r"docs/([\w-]+)\.md[\s(]*\"([^\"]{1,200})\"")
SOURCES = ("libs", "services", "bench", "tests", "scripts", "docs")


def dated_headings(text: str) -> list[str]:
    """Headings that carry a date (`## Figures (2026-11-24)`)."""
    return [line for line in text.splitlines() if DATED_HEADING.match(line)]


def commit_hashes(text: str) -> list[str]:
    """Words that look like commit hashes, UUIDs and their shortened forms left out."""
    return HASH.findall(UUID_LIKE.sub(" ", text))


def test_the_rules_find_what_they_are_for() -> None:
    assert dated_headings("## Figures (2026-11-24)\n## Figures\ntext 2026-11-24\n") == ["## Figures (2026-11-24)"]
    assert commit_hashes("main 595aff9, `fc10c60`, (commit 13a95a3)") == ["595aff9", "fc10c60", "13a95a3"]
    assert commit_hashes("deploy 01a20ef5-b1f8-79df-80be-becc06c018f5, request 01a205f1-0218-…") == []
    assert commit_hashes("1073741824 bytes, 0.30000000000000004, a decade, accede") == []


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_dated_heading_and_no_commit_hash(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert dated_headings(text) == [], "dated headings belong to git history (CHANGELOG.md), not docs/"
    assert commit_hashes(text) == [], "commit hashes belong to git history, not docs/"


def _headings(page: str) -> list[str]:
    text = (ROOT / "docs" / f"{page}.md").read_text(encoding="utf-8")
    return [" ".join(line.lstrip("#").split()).lower() for line in text.splitlines() if re.match(r"#{1,6} ", line)]


def _citations() -> list[tuple[str, str, str]]:
    """(citing file, page, title) for every citation of a checked page; a title wrapped over lines (and comment
    markers) is joined with single spaces."""
    found = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in (".py", ".md", ".sh", ".sql") or "bench/out/" in path.as_posix():
                continue
            joined = re.sub(r"\s*\n\s*(?:#+\s*)?", " ", path.read_text(encoding="utf-8", errors="replace"))
            for page, title in CITATION.findall(joined):
                if page in CHECKED_PAGES:
                    found.append((path.relative_to(ROOT).as_posix(), page, " ".join(title.split())))
    return found


def test_citations_of_the_reference_pages_name_their_headings() -> None:
    headings = {page: _headings(page) for page in CHECKED_PAGES}
    missing = [
        f"{where}: docs/{page}.md {title!r}"
        for where, page, title in _citations()
        if not any(heading.startswith(title.lower()) for heading in headings[page])
    ]
    assert missing == []
