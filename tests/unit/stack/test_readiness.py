"""When `eru up` may say it is up (eru.stack.readiness, eru.stack.supervisor): readiness probes, crash loops before
readiness, the failure message with the last error line, and the command lines that never import from the
caller's directory."""

from __future__ import annotations

import http.server
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from eru.stack.info import last_error_line, python_module, service_command
from eru.stack.readiness import crash_report, failure_message, http_ready
from eru.stack.supervisor import Child, RestartPolicy, crash_loop, probe_readiness, startup, supervise_once


class Script:
    """A child whose process 'runs' until the test says it exited, and is ready when the test says so."""

    def __init__(self) -> None:
        self.code: int | None = None
        self.starts = 0
        self.ready = False

    def start(self) -> int:
        self.starts += 1
        self.code = None
        self.ready = False
        return 1000 + self.starts

    def exit_code(self) -> int | None:
        return self.code


def child_of(script: Script, name: str = "allocator", output: Path | None = None) -> Child:
    child = Child(name, script.start, script.exit_code, probe=lambda: script.ready, output=output)
    child.launch(0.0)
    return child


def crash_and_restart(children: list[Child], script: Script, now: float, code: int = 2) -> float:
    """The script's process exits with `code`; the supervisor notes it and restarts it after its backoff."""
    script.code = code
    supervise_once(children, POLICY, lambda _line: None, now=now)
    restart_at = children[0].restart_at
    assert restart_at is not None
    supervise_once(children, POLICY, lambda _line: None, now=restart_at)
    return restart_at + 0.1


POLICY = RestartPolicy(base_seconds=0.5, crash_loop_after=3, max_quick_crashes=10)


def test_a_child_is_ready_once_its_probe_says_so_and_a_server_once_it_started() -> None:
    script = Script()
    service = child_of(script)
    server = Child("nats-server", lambda: 1, lambda: None, pid=1)  # no probe: ready once it runs
    assert not probe_readiness([service])
    assert not service.ready
    assert startup([service, server], POLICY).waiting == ["allocator", "nats-server"]
    script.ready = True
    assert probe_readiness([service, server])
    assert service.ready
    assert server.ready
    assert startup([service, server], POLICY).ready


def test_three_exits_before_ready_are_a_crash_loop_and_a_ready_run_starts_the_count_afresh() -> None:
    script = Script()
    child = child_of(script)
    now = crash_and_restart([child], script, 1.0)
    now = crash_and_restart([child], script, now)
    assert crash_loop(child, POLICY) is None  # two in a row: a slow start, perhaps
    script.ready = True
    probe_readiness([child])
    assert child.unready_crashes == 0
    now = crash_and_restart([child], script, now)  # it had been ready: not a crash before readiness
    assert child.unready_crashes == 0
    now = crash_and_restart([child], script, now)
    now = crash_and_restart([child], script, now)
    assert crash_loop(child, POLICY) is None
    script.code = 2
    supervise_once([child], POLICY, lambda _line: None, now=now)
    assert crash_loop(child, POLICY) == "exited 3 times in a row before it was ready (last exit code 2)"
    state = startup([child], POLICY)
    assert state.looping == {"allocator": "exited 3 times in a row before it was ready (last exit code 2)"}
    assert not state.ready
    assert state.waiting == []


def test_the_failure_names_the_service_and_the_last_line_of_its_latest_run(tmp_path: Path) -> None:
    output = tmp_path / "allocator.out"
    output.write_text("an earlier run's line\n")
    script = Script()
    child = child_of(script, output=output)
    assert child.output_from == len("an earlier run's line\n")
    with output.open("a") as handle:
        handle.write("Traceback (most recent call last):\n  File x\nImportError: cannot import name 'x'\n\n")
    now = crash_and_restart([child], script, 1.0)
    now = crash_and_restart([child], script, now)
    script.code = 1
    supervise_once([child], POLICY, lambda _line: None, now=now)
    message = failure_message(startup([child], POLICY), [child])
    assert message == (
        "the stack did not come up: allocator is crash-looping: exited 3 times in a row before it was ready "
        "(last exit code 1); last error: ImportError: cannot import name 'x'\n"
        "see `eru logs allocator` and `eru status`"
    )
    assert crash_report([child], POLICY) == {
        "allocator": {
            "reason": "exited 3 times in a row before it was ready (last exit code 1)",
            "last_error": "ImportError: cannot import name 'x'",
        }
    }


def test_a_deadline_names_what_is_not_ready() -> None:
    script = Script()
    child = child_of(script, name="node-agent-sim")
    message = failure_message(startup([child], POLICY), [child], timed_out=300)
    assert message.startswith("the stack did not come up: not ready within 300 s: node-agent-sim\n")
    assert message.endswith("see `eru logs node-agent-sim` and `eru status`")


def test_last_error_line(tmp_path: Path) -> None:
    path = tmp_path / "x.out"
    assert last_error_line(path) is None
    path.write_text("first\nsecond\n  \n")
    assert last_error_line(path) == "second"
    assert last_error_line(path, since=path.stat().st_size) is None  # nothing since
    assert last_error_line(path, since=10_000) == "second"  # truncated since: the file as it is


def test_every_child_python_runs_in_safe_path_mode() -> None:
    assert python_module("eru.cli", "up") == [sys.executable, "-P", "-m", "eru.cli", "up"]
    assert service_command("node-agent") == [sys.executable, "-P", "-m", "eru_node_agent"]


class _Handler(http.server.BaseHTTPRequestHandler):
    ready = False

    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/readyz" and _Handler.ready else 503)
        self.end_headers()

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[str]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


def test_http_ready_asks_readyz(health_server: str) -> None:
    probe = http_ready(health_server)
    _Handler.ready = False
    assert probe() is False
    _Handler.ready = True
    assert probe() is True
    assert http_ready("http://127.0.0.1:1/metrics")() is False  # nothing listens: not ready, no error


def test_status_shows_a_crash_looping_process_with_its_last_error_and_is_unhealthy(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from eru.cli.stack_commands import status_document
    from eru.cli.status_text import print_status

    monkeypatch.setenv("COLUMNS", "400")
    ready = [
        {"service": service, "replica": f"{service}-1", "version": "0.1.0", "ready": True}
        for service in ("distributor", "node-agent", "eviction")
    ]
    looping = {
        "allocator": {
            "reason": "exited 3 times in a row before it was ready (last exit code 2)",
            "last_error": "eru-allocator: invalid input: allocator.keep.bogus: unknown setting [x]",
        }
    }
    doc = status_document(
        nats={"state": "up", "url": "nats://x", "detail": ""},
        postgres={"state": "up", "dsn": "postgresql://x", "version": "18", "detail": ""},
        replicas=ready,
        restarts={"allocator": 3},
        crash_loops=looping,
    )
    assert doc["healthy"] is False
    assert doc["crash_looping"] == looping
    print_status(doc)
    out = " ".join(capsys.readouterr().out.split())
    assert (
        "allocator is crash-looping: exited 3 times in a row before it was ready (last exit code 2); last error: "
        "eru-allocator: invalid input: allocator.keep.bogus: unknown setting [x] (see `eru logs allocator`)"
    ) in out
    assert "crash-looping: eru-allocator: invalid input" in out  # the allocator's row of the table
    assert "no replica answered" not in out
    healthy = status_document(nats=doc["nats"], postgres=doc["postgres"], replicas=ready)
    assert healthy["crash_looping"] == {}
