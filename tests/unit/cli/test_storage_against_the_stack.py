"""`eru status`/`eru gc` measure storage against the settings the stack runs with (recorded by `eru up` in
stack.json), not the ones of the shell the verb is typed in: a stack started with ERU_LOG_MAX_BYTES=64KiB shows its
logs against 64 KiB × (backups + 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eru.cli.storage_commands import storage_document


def test_logs_and_retention_are_measured_against_the_stacks_own_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ERU_LOG_MAX_BYTES", raising=False)
    monkeypatch.delenv("ERU_RETENTION_SECONDS", raising=False)
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "allocator.log").write_bytes(b"x" * 1000)
    (tmp_path / "logs" / "allocator.log.1").write_bytes(b"x" * 65536)
    stack = {
        "state_dir": str(tmp_path), "nats_url": "nats://127.0.0.1:9", "database_dsn": "postgresql://127.0.0.1:9/x",
        "supervisor_pid": 1, "embedded_nats": True, "embedded_postgres": True,
        "settings": {"retention_seconds": 300, "log_max_bytes": 65536, "log_backups": 2},
    }  # fmt: skip
    (tmp_path / "stack.json").write_text(json.dumps(stack))
    doc = storage_document(None, None, tmp_path)
    (log,) = doc["logs"]
    assert (log["max_bytes"], log["cap_bytes"], log["files"], log["bytes"]) == (65536, 3 * 65536, 2, 66536)
    assert doc["retention_seconds"] == 300
    (tmp_path / "stack.json").unlink()  # no stack recorded: this shell's settings (the defaults)
    assert storage_document(None, None, tmp_path)["logs"][0]["max_bytes"] == 50 * 1024 * 1024
