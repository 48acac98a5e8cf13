"""EmbeddedPostgres: a real server on a Unix socket and on loopback TCP, restartable, leaving no process behind."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from eru.store.pool import connect
from eru.testing.postgres_server import EmbeddedPostgres, PostgresServerError, free_port


def _server_pids(server: EmbeddedPostgres) -> set[int]:
    assert server.pid is not None
    postmaster = psutil.Process(server.pid)
    return {postmaster.pid} | {child.pid for child in postmaster.children(recursive=True)}


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.add(pid)
        except psutil.NoSuchProcess:
            continue
    return alive


def _socket_in_state_dir(server: EmbeddedPostgres) -> bool:
    return server.socket_dir == server.state_dir / "run" and (server.socket_dir / f".s.PGSQL.{server.port}").is_socket()


@pytest.fixture
def private_dir() -> Iterator[Path]:
    """A directory outside pytest's temp root, for every server of this module: run as root, the server runs as
    another account, and every pytest session that starts (anyone's, on a shared machine) resets /tmp/pytest-of-root
    to 0700 (_pytest/tmpdir.py), locking that account out of a data directory under `tmp_path` mid-test (initdb
    "could not open directory …: Permission denied", seen under load with several sessions at once)."""
    path = Path(tempfile.mkdtemp(prefix="eru-test-pg-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_server_answers_on_tcp_and_socket_and_stop_leaves_no_process(private_dir: Path) -> None:
    server = EmbeddedPostgres(private_dir / "pg", durable=False)
    server.start()
    try:
        assert server.is_running()
        assert _socket_in_state_dir(server)
        server.create_database("eru")
        server.create_database("eru")  # idempotent
        for dsn in (server.dsn_for("eru"), server.socket_dsn_for("eru")):
            conn = await connect(dsn)
            try:
                assert await conn.fetchval("SELECT current_database()") == "eru"
            finally:
                await conn.close()
        pids = _server_pids(server)
        assert len(pids) > 1  # postmaster plus its background workers
    finally:
        server.stop()
    assert not server.is_running()
    assert _alive(pids) == set()


async def test_restart_on_existing_data_dir_keeps_data(private_dir: Path) -> None:
    state = private_dir / "pg"
    first = EmbeddedPostgres(state, durable=True)
    first.start()
    try:
        first.create_database("eru")
        conn = await connect(first.dsn_for("eru"))
        await conn.execute("CREATE TABLE kept (value text)")
        await conn.execute("INSERT INTO kept VALUES ('survives restart')")
        await conn.close()
    finally:
        first.stop()
    assert (state / "data" / "PG_VERSION").exists()

    port = free_port()
    second = EmbeddedPostgres(state, port=port)
    second.start()
    try:
        assert second.port == port
        conn = await connect(f"postgresql://postgres@127.0.0.1:{port}/eru")
        try:
            assert await conn.fetchval("SELECT value FROM kept") == "survives restart"
        finally:
            await conn.close()
    finally:
        second.stop()


def test_leftover_server_of_a_dead_owner_is_replaced(private_dir: Path) -> None:
    orphaned = EmbeddedPostgres(private_dir / "pg", durable=False)
    orphaned.start()
    orphan_pids = _server_pids(orphaned)
    replacement = EmbeddedPostgres(private_dir / "pg", durable=False)  # as after a crash of the first owner
    try:
        replacement.start()
        assert replacement.is_running()
        assert replacement.pid not in orphan_pids
        assert _alive(orphan_pids) == set()
        assert replacement.database_exists("postgres")
    finally:
        replacement.stop()
        orphaned.stop()


def test_port_in_use_fails_with_the_reason(private_dir: Path) -> None:
    holder = EmbeddedPostgres(private_dir / "a", durable=False)
    holder.start()
    try:
        clash = EmbeddedPostgres(private_dir / "b", port=holder.port, durable=False)
        with pytest.raises(PostgresServerError, match=f"did not start on 127.0.0.1:{holder.port}"):
            clash.start(timeout=10)
        assert not clash.is_running()
    finally:
        holder.stop()


def test_bad_database_name_is_invalid_input(postgres_server: EmbeddedPostgres) -> None:
    from eru.errors import InvalidInput

    with pytest.raises(InvalidInput, match="name"):
        postgres_server.create_database('x"; DROP DATABASE postgres; --')


def test_deep_state_dir_gets_a_short_socket_dir(private_dir: Path) -> None:
    deep = private_dir / ("d" * 60) / ("e" * 60)
    server = EmbeddedPostgres(deep, durable=False)
    assert not server.socket_dir.is_relative_to(deep)  # a Unix socket path there would be over the kernel's limit
    server.start()
    try:
        assert (server.socket_dir / f".s.PGSQL.{server.port}").is_socket()
        assert server.database_exists("postgres")
    finally:
        server.stop()
    assert (deep / "data" / "PG_VERSION").exists()
