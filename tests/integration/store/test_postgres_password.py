"""The embedded PostgreSQL with a password: scram-sha-256 for every connection, nothing trusted (docs/security.md)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from eru.testing.postgres_server import EmbeddedPostgres

PASSWORD = "pw-Zq81_generated"


@pytest.fixture
def state_dir() -> Iterator[Path]:
    # outside pytest's private temp root, which the server account (under root) could not traverse
    path = Path(tempfile.mkdtemp(prefix="eru-pgpw-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _rules(data_dir: Path) -> list[str]:
    text = (data_dir / "pg_hba.conf").read_text()
    return [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


async def _refused(dsn: str) -> str:
    with pytest.raises((asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError)) as refused:
        await asyncpg.connect(dsn, timeout=10)
    return str(refused.value)


async def test_password_required_on_tcp_and_socket(state_dir: Path) -> None:
    server = EmbeddedPostgres(state_dir, durable=False, password=PASSWORD)
    server.start()
    try:
        assert all(rule.split()[-1] == "scram-sha-256" for rule in _rules(server.data_dir))
        assert not (state_dir / ".pwfile").exists()
        server.create_database("eru")
        connection = await asyncpg.connect(server.dsn_for("eru"), timeout=10)
        assert await connection.fetchval("SELECT 1") == 1
        await connection.close()
        without = f"postgresql://postgres@127.0.0.1:{server.port}/eru"
        assert "password" in (await _refused(without)).lower()
        await _refused(f"postgresql://postgres:wrong@127.0.0.1:{server.port}/eru")
        await _refused(f"postgresql://postgres@/eru?host={server.socket_dir}&port={server.port}")
    finally:
        server.stop()


async def test_a_trusting_data_directory_is_switched_to_the_password(state_dir: Path) -> None:
    trusting = EmbeddedPostgres(state_dir, durable=False)
    trusting.start()
    trusting.stop()
    assert any(rule.split()[-1] == "trust" for rule in _rules(state_dir / "data"))
    server = EmbeddedPostgres(state_dir, durable=False, password=PASSWORD)
    server.start()
    try:
        assert all(rule.split()[-1] == "scram-sha-256" for rule in _rules(server.data_dir))
        connection = await asyncpg.connect(server.dsn_for("postgres"), timeout=10)
        await connection.close()
        await _refused(f"postgresql://postgres@127.0.0.1:{server.port}/postgres")
    finally:
        server.stop()
