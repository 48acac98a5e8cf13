"""`eru logs`: which files a name means, the last lines, and following a file that grows or is rotated."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from eru.cli.logs_commands import _follow_one, last_lines, log_files


def test_a_service_name_means_all_its_processes(tmp_path: Path) -> None:
    logs = {"allocator": "/l/allocator.log", "node-agent-sim": "/l/sim.log", "node-agent-docker": "/l/docker.log"}
    assert set(log_files(logs, tmp_path, "node-agent")) == {"node-agent-sim", "node-agent-docker"}
    assert set(log_files(logs, tmp_path, "node-agent-sim")) == {"node-agent-sim"}
    with pytest.raises(typer.Exit) as caught:
        log_files(logs, tmp_path, "node")  # a prefix of a name is not a name
    assert caught.value.exit_code == 2


def test_last_lines(tmp_path: Path) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"".join(f"line {i}\n".encode() for i in range(10)))
    lines, offset = last_lines(path, 3)
    assert lines == [b"line 7\n", b"line 8\n", b"line 9\n"]
    assert offset == path.stat().st_size
    assert last_lines(path, 0)[0] == []


def test_follow_prints_appended_lines_then_a_rotated_file_from_its_start(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    path = tmp_path / "a.log"
    path.write_bytes(b"old\n")
    handles: dict = {}  # type: ignore[type-arg]
    offsets = {"a": path.stat().st_size}
    partial = {"a": b""}
    with path.open("ab") as handle:
        handle.write(b"new 1\nhalf")
    _follow_one("a", path, handles, offsets, partial, "")
    with path.open("ab") as handle:
        handle.write(b" line\n")
    _follow_one("a", path, handles, offsets, partial, "")
    path.write_bytes(b"after rotation\n")  # smaller than what was read: a new file
    _follow_one("a", path, handles, offsets, partial, "")
    path.rename(tmp_path / "a.log.1")
    path.write_bytes(b"a renamed-away file, and a new one longer than the old one was\n")
    _follow_one("a", path, handles, offsets, partial, "")
    for handle in handles.values():
        handle.close()
    assert (
        capsysbinary.readouterr().out
        == b"new 1\nhalf line\nafter rotation\na renamed-away file, and a new one longer than the old one was\n"
    )


def test_logs_show_the_crash_output_after_the_log_lines_even_without_a_stack(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from eru.cli.app import app

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "allocator.log").write_text('{"event": "service.starting"}\n')
    (logs / "allocator.out").write_text("Traceback (most recent call last):\nImportError: cannot import name 'x'\n")
    (logs / "eviction.log").write_text('{"event": "service.starting"}\n')
    (logs / "eviction.out").write_text("")  # a healthy service's output file: nothing is shown of it
    result = CliRunner().invoke(app, ["logs", "allocator", "--state-dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        '{"event": "service.starting"}',
        "allocator.out | Traceback (most recent call last):",
        "allocator.out | ImportError: cannot import name 'x'",
    ]
    result = CliRunner().invoke(app, ["logs", "eviction", "--state-dir", str(tmp_path)])
    assert result.output.splitlines() == ['{"event": "service.starting"}']
    result = CliRunner().invoke(app, ["logs", "allocator", "--state-dir", str(tmp_path / "nowhere")])
    assert result.exit_code == 2
