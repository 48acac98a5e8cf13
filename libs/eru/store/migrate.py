"""Versioned SQL migrations: `migrations/NNNN_name.sql`, applied in order, each in its own transaction.

Every applied version is recorded in `schema_migrations` with a checksum of its text. The whole run holds a
session-level advisory lock on a fixed key, so any number of processes may call `apply_migrations` at the same time:
one applies, the others wait and then find nothing left to do. A recorded migration whose file changed afterwards is
an error (`MigrationError`): migrations are append-only, fix forward with a new file. The one exception is an edit
inside SQL comments that is listed, with both texts' checksums, in `COMMENT_ONLY_EDITS`.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import asyncpg

from eru.errors import EruError
from eru.store.transaction import Connection, advisory_key

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
MIGRATION_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")
MIGRATION_LOCK_KEY = advisory_key("eru.schema_migrations")

CREATE_TABLE_SQL = """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version     integer     PRIMARY KEY,
    name        text        NOT NULL,
    checksum    text        NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
)
"""


# Shipped migrations whose text changed only inside SQL comments (their citations of a spec section became docs/
# references): version → (checksum of the earlier text, checksum of today's text). A database that recorded the
# earlier one holds the same schema, so the migration counts as unchanged — as long as today's file is exactly the
# edited text. tests/unit/test_migration_comment_edits.py rebuilds each earlier text from today's file and checks
# that only comment lines differ.
COMMENT_ONLY_EDITS: dict[int, tuple[str, str]] = {
    1: (
        "d3c638ad5a03d3eb570ed419a20d524111720aec2c84a4b56f43b72691a632d6",
        "bd5cb5b588a25a154b2deea13e4e989e8b9bda4142e7f7a6b80adcd8f6069fb3",
    ),
    2: (
        "70c8ccc8d3212fbf13edf42ce0522561f782b619d308da282fea2bebd849a7c4",
        "52876f9b2643d0279f17e9752ccb6bff2117d62b1e805c48a87884abd4a8382f",
    ),
    3: (
        "c400a85d520a06a2f303ffece785460c4e4b2f50efcbbefec14afe3668f92af3",
        "1b529c601a691592a03aca47296483ac269d2f4eadecf880c326e9db383b2616",
    ),
}


class MigrationError(EruError):
    """A migration file is malformed, duplicated, changed after being applied, or failed to apply."""

    code = "migration"


@dataclass(frozen=True)
class Migration:
    """One migration file."""

    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """sha256 of the file's text."""
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(directory: Path = MIGRATIONS_DIR) -> tuple[Migration, ...]:
    """All migrations under `directory`, ordered by version; every `.sql` file must be named `NNNN_name.sql`."""
    migrations: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        match = MIGRATION_FILE.fullmatch(path.name)
        if match is None:
            raise MigrationError(f"{path.name}: migration files are named NNNN_lowercase_name.sql", file=str(path))
        version = int(match["version"])
        if version in migrations:
            raise MigrationError(
                f"{path.name}: version {version} is also used by {migrations[version].name}", file=str(path)
            )
        migrations[version] = Migration(version=version, name=match["name"], sql=path.read_text())
    return tuple(migrations[version] for version in sorted(migrations))


async def applied_versions(conn: Connection) -> dict[int, str]:
    """{version: checksum} recorded in `schema_migrations` (empty when the table does not exist yet)."""
    exists = await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL")
    if not exists:
        return {}
    rows = await conn.fetch("SELECT version, checksum FROM schema_migrations")
    return {int(row["version"]): str(row["checksum"]) for row in rows}


async def apply_migrations(target: asyncpg.Pool | Connection, directory: Path = MIGRATIONS_DIR) -> list[int]:
    """Apply every pending migration in version order; returns the versions applied by this call (often none)."""
    migrations = load_migrations(directory)
    if isinstance(target, asyncpg.Pool):
        async with target.acquire() as conn:
            return await _apply_locked(conn, migrations)
    return await _apply_locked(target, migrations)


async def _apply_locked(conn: Connection, migrations: tuple[Migration, ...]) -> list[int]:
    await conn.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
    try:
        await conn.execute(CREATE_TABLE_SQL)
        recorded = await applied_versions(conn)
        _check_unchanged(migrations, recorded)
        applied: list[int] = []
        for migration in migrations:
            if migration.version in recorded:
                continue
            try:
                async with conn.transaction():
                    await conn.execute(migration.sql)
                    await conn.execute(
                        "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                        migration.version,
                        migration.name,
                        migration.checksum,
                    )
            except asyncpg.PostgresError as error:
                raise MigrationError(
                    f"migration {migration.version:04d}_{migration.name} failed: {error}",
                    version=migration.version,
                ) from error
            applied.append(migration.version)
        return applied
    finally:
        # A broken connection has already lost its session lock; nothing to release then.
        with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            await conn.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)


def _check_unchanged(
    migrations: tuple[Migration, ...],
    recorded: dict[int, str],
    comment_only_edits: dict[int, tuple[str, str]] | None = None,
) -> None:
    edits = COMMENT_ONLY_EDITS if comment_only_edits is None else comment_only_edits
    for migration in migrations:
        checksum = recorded.get(migration.version)
        if checksum is None or checksum == migration.checksum:
            continue
        if edits.get(migration.version) != (checksum, migration.checksum):
            raise MigrationError(
                f"migration {migration.version:04d}_{migration.name} changed after it was applied; "
                "add a new migration instead of editing an applied one",
                version=migration.version,
            )
