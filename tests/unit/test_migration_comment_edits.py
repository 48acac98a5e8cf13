"""Migrations 0001–0003 had "SPEC §" citations in SQL comments, replaced by docs/ references. A database migrated
before still records the earlier checksums: `COMMENT_ONLY_EDITS` accepts exactly those, and this test proves each
earlier text differed from today's file only in comment lines (it rebuilds the earlier text and checks the sha256)."""

from __future__ import annotations

import hashlib

import pytest

from eru.store.migrate import COMMENT_ONLY_EDITS, Migration, MigrationError, _check_unchanged, load_migrations

# today's text → the text before the edit, per version; every line touched must be an SQL comment
EARLIER = {
    1: [
        ("requests and limits (docs/planning.md, Requests)", "requests and limits (SPEC §1)"),
        ("re-run offline (docs/replay.md).", "re-run offline (SPEC §9, §10)."),
    ],
    2: [("takes over (docs/node-agent.md, Replace); it holds no", "takes over (SPEC §2.6); it holds no")],
    3: [("(docs/fairness-and-scoring.md): the default", "(docs/fairness-and-scoring.md, SPEC §8): the default")],
}


def test_each_listed_checksum_is_todays_file_with_only_comments_changed() -> None:
    migrations = {m.version: m for m in load_migrations()}
    assert set(COMMENT_ONLY_EDITS) == set(EARLIER)
    for version, edits in EARLIER.items():
        text = migrations[version].sql
        for now, before in edits:
            (line,) = [line for line in text.splitlines() if now in line]
            assert line.strip().startswith("--"), line
            text = text.replace(now, before)
        assert (hashlib.sha256(text.encode()).hexdigest(), migrations[version].checksum) == COMMENT_ONLY_EDITS[version]
    assert not any("SPEC §" in m.sql for m in migrations.values())


def test_only_the_listed_earlier_checksum_with_todays_exact_text_passes() -> None:
    migration = Migration(1, "first", "-- today\nCREATE TABLE t (id int);\n")
    _check_unchanged((migration,), {1: migration.checksum}, {})
    _check_unchanged((migration,), {1: "earlier"}, {1: ("earlier", migration.checksum)})
    with pytest.raises(MigrationError, match="changed after it was applied"):
        _check_unchanged((migration,), {1: "something else"}, {1: ("earlier", migration.checksum)})
    with pytest.raises(MigrationError, match="changed after it was applied"):  # edited again since the listed edit
        _check_unchanged((migration,), {1: "earlier"}, {1: ("earlier", "the text of the listed edit")})
    with pytest.raises(MigrationError, match="changed after it was applied"):
        _check_unchanged((migration,), {1: "earlier"}, {2: ("earlier", migration.checksum)})
