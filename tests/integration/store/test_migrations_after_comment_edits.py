"""A database migrated before the comment-only edits of 0001–0003 (docs/store.md) migrates on with today's files:
the recorded earlier checksums are accepted, everything after is applied, and a real change is still refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from eru.store.migrate import MIGRATIONS_DIR, MigrationError, apply_migrations, load_migrations
from eru.store.pool import connect

EARLIER = {  # today's comment text → the text shipped before (tests/unit/test_migration_comment_edits.py checks it)
    "0001_init.sql": [
        ("requests and limits (docs/planning.md, Requests)", "requests and limits (SPEC §1)"),
        ("re-run offline (docs/replay.md).", "re-run offline (SPEC §9, §10)."),
    ],
    "0002_pipeline.sql": [
        ("takes over (docs/node-agent.md, Replace); it holds no", "takes over (SPEC §2.6); it holds no")
    ],
    "0003_tenant_admission.sql": [
        ("(docs/fairness-and-scoring.md): the default", "(docs/fairness-and-scoring.md, SPEC §8): the default")
    ],
}


async def test_a_database_migrated_with_the_earlier_texts_migrates_on(postgres_empty_dsn: str, tmp_path: Path) -> None:
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    for name, edits in EARLIER.items():
        text = (MIGRATIONS_DIR / name).read_text()
        for now, before in edits:
            text = text.replace(now, before)
        (earlier / name).write_text(text)
    conn = await connect(postgres_empty_dsn)
    try:
        assert await apply_migrations(conn, earlier) == [1, 2, 3]
        applied = await apply_migrations(conn)  # today's files: 0001–0003 unchanged in substance, the rest applied
        assert applied == [m.version for m in load_migrations() if m.version > 3]
        changed = tmp_path / "changed"
        changed.mkdir()
        for path in MIGRATIONS_DIR.glob("*.sql"):
            (changed / path.name).write_text(path.read_text())
        (changed / "0002_pipeline.sql").write_text((MIGRATIONS_DIR / "0002_pipeline.sql").read_text() + "\nSELECT 1;\n")
        with pytest.raises(MigrationError, match="0002_pipeline changed after it was applied"):
            await apply_migrations(conn, changed)
    finally:
        await conn.close()
