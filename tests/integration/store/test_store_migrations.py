"""Migrations against a real PostgreSQL: in order, recorded once, idempotent, safe from concurrent processes."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from eru.store.migrate import MIGRATION_LOCK_KEY, MigrationError, apply_migrations, load_migrations
from eru.store.pool import connect

EXPECTED_TABLES = {"pods", "nodes", "tenants", "deploys", "containers", "outbox", "inbox", "decisions"}


async def _tables(dsn: str) -> set[str]:
    conn = await connect(dsn)
    try:
        rows = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    finally:
        await conn.close()
    return {row["tablename"] for row in rows}


async def _recorded_versions(dsn: str) -> list[int]:
    conn = await connect(dsn)
    try:
        rows = await conn.fetch("SELECT version FROM schema_migrations ORDER BY version")
    finally:
        await conn.close()
    return [row["version"] for row in rows]


async def test_apply_creates_schema_and_second_run_is_a_no_op(postgres_empty_dsn: str) -> None:
    versions = [migration.version for migration in load_migrations()]
    assert versions == sorted(versions)
    assert versions[0] == 1

    conn = await connect(postgres_empty_dsn)
    try:
        assert await apply_migrations(conn) == versions
        assert await apply_migrations(conn) == []
    finally:
        await conn.close()
    assert EXPECTED_TABLES | {"schema_migrations"} <= await _tables(postgres_empty_dsn)
    assert await _recorded_versions(postgres_empty_dsn) == versions


def test_two_processes_migrating_at_once_both_succeed(postgres_empty_dsn: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    script = (
        "import asyncio, pathlib, sys, time\n"
        "from eru.store.migrate import apply_migrations\n"
        "from eru.store.pool import create_pool\n"
        "async def main():\n"
        "    pool = await create_pool(sys.argv[1], min_size=1, max_size=1)\n"
        "    print('ready', flush=True)\n"
        "    while not pathlib.Path(sys.argv[2]).exists():\n"
        "        time.sleep(0.005)\n"
        "    applied = await apply_migrations(pool)\n"
        "    await pool.close()\n"
        "    print('applied', ','.join(map(str, applied)), flush=True)\n"
        "asyncio.run(main())\n"
    )
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", script, postgres_empty_dsn, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for process in processes:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
    go.touch()  # both are connected: release them together
    outputs = []
    for process in processes:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        outputs.append(out.strip())

    versions = [migration.version for migration in load_migrations()]
    applied_lists = sorted(output.removeprefix("applied").strip() for output in outputs)
    # exactly one process applied everything; the other found nothing to do
    assert applied_lists == ["", ",".join(map(str, versions))]
    assert asyncio.run(_recorded_versions(postgres_empty_dsn)) == versions
    assert asyncio.run(_tables(postgres_empty_dsn)) >= EXPECTED_TABLES


async def test_migration_waits_for_the_lock_holder(postgres_empty_dsn: str) -> None:
    holder = await connect(postgres_empty_dsn)
    migrator = await connect(postgres_empty_dsn)
    try:
        await holder.execute("SELECT pg_advisory_lock($1)", MIGRATION_LOCK_KEY)
        run = asyncio.create_task(apply_migrations(migrator))
        await asyncio.sleep(0.5)
        assert not run.done()
        assert await holder.fetchval("SELECT to_regclass('schema_migrations')") is None
        await holder.execute("SELECT pg_advisory_unlock($1)", MIGRATION_LOCK_KEY)
        assert await asyncio.wait_for(run, 30) == [m.version for m in load_migrations()]
    finally:
        await holder.close()
        await migrator.close()


def _write(directory: Path, name: str, sql: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(sql)


async def test_failed_migration_is_rolled_back_and_not_recorded(postgres_empty_dsn: str, tmp_path: Path) -> None:
    migrations = tmp_path / "migrations"
    _write(migrations, "0001_first.sql", "CREATE TABLE first (id int);")
    _write(migrations, "0002_broken.sql", "CREATE TABLE second (id int);\nSELECT no_such_function();")
    conn = await connect(postgres_empty_dsn)
    try:
        with pytest.raises(MigrationError, match="0002_broken failed") as failure:
            await apply_migrations(conn, migrations)
        assert failure.value.details["version"] == 2
        assert await conn.fetchval("SELECT to_regclass('first') IS NOT NULL")
        assert await conn.fetchval("SELECT to_regclass('second') IS NULL")  # its half-applied statements are gone
        assert await conn.fetchval("SELECT array_agg(version) FROM schema_migrations") == [1]
        # the lock was released: a fixed file applies on the next run
        _write(migrations, "0002_broken.sql", "CREATE TABLE second (id int);")
        assert await apply_migrations(conn, migrations) == [2]
    finally:
        await conn.close()


async def test_editing_an_applied_migration_is_refused(postgres_empty_dsn: str, tmp_path: Path) -> None:
    migrations = tmp_path / "migrations"
    _write(migrations, "0001_first.sql", "CREATE TABLE first (id int);")
    conn = await connect(postgres_empty_dsn)
    try:
        assert await apply_migrations(conn, migrations) == [1]
        _write(migrations, "0001_first.sql", "CREATE TABLE first (id bigint);")
        _write(migrations, "0002_second.sql", "CREATE TABLE second (id int);")
        with pytest.raises(MigrationError, match="changed after it was applied"):
            await apply_migrations(conn, migrations)
        assert await conn.fetchval("SELECT to_regclass('second') IS NULL")
    finally:
        await conn.close()


def test_misnamed_and_duplicate_migration_files_are_refused(tmp_path: Path) -> None:
    misnamed = tmp_path / "misnamed"
    _write(misnamed, "1_init.sql", "SELECT 1;")
    with pytest.raises(MigrationError, match=r"1_init\.sql"):
        load_migrations(misnamed)
    duplicate = tmp_path / "duplicate"
    _write(duplicate, "0001_a.sql", "SELECT 1;")
    _write(duplicate, "0001_b.sql", "SELECT 1;")
    with pytest.raises(MigrationError, match="version 1 is also used"):
        load_migrations(duplicate)
