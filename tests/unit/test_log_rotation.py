"""Log files rotate by size with a fixed number of old files (eru.logging, docs/operations.md "Logs")."""

from __future__ import annotations

import json
from pathlib import Path

import structlog

from eru.logging import configure_logging


def test_a_log_file_rotates_at_its_size_and_keeps_its_backups(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "allocator.log"
    configure_logging("allocator", "r1", log_format="json", level="info", log_file=path, max_bytes=20_000, backups=2)
    try:
        log = structlog.get_logger()
        for index in range(2_000):
            log.info("deploy.planned", index=index, pad="x" * 40)
            log.debug("not.written", index=index)
    finally:
        configure_logging("test", "test")  # back to stderr, closing the file
    files = sorted(p.name for p in path.parent.iterdir())
    assert files == ["allocator.log", "allocator.log.1", "allocator.log.2"]
    assert all((path.parent / name).stat().st_size <= 20_000 for name in files)
    assert {(path.parent / name).stat().st_mode & 0o777 for name in files} == {0o600}  # private, rotated ones too
    last = [json.loads(line) for line in path.read_text().splitlines()][-1]
    assert (last["event"], last["index"], last["service"]) == ("deploy.planned", 1999, "allocator")
    assert "not.written" not in path.read_text()
