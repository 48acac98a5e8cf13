"""Bad input of `eru run`, `eru exec` and `eru container logs` is refused before anything is sent: one line naming
the option or argument and the rule, exit 2 (docs/cli.md "eru run, eru exec, eru container logs")."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from eru.cli.app import app
from eru.cli.run_commands import seconds

runner = CliRunner()
NOWHERE = ["--nats", "nats://127.0.0.1:1"]  # never reached: each fails before connecting


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--image", "busybox", "--", "true"], "eru run needs --pod and --image"),
        (["run", "--pod", "p", "--image", "busybox", "--count", "0", "--", "true"], "--count must be at least 1"),
        (["run", "--pod", "p", "--image", "busybox"], "CMD: give the command after `--`"),
        (["run", "--pod", "p", "--image", "busybox", "--timeout", "soon", "--", "true"], "--timeout: 'soon' is not"),
        (["run", "--pod", "p", "--image", "busybox", "--timeout", "0s", "--", "true"], "--timeout: '0s' is not"),
        (["run", "--pod", "p", "--image", "bad image", "--", "true"], "--image"),
        (["exec", "c1", "--", *["x"] * 257], "CMD: 257 arguments, above the limit of 256"),
        (["exec", "c1", "--", "a" * 40_000], "CMD: argument 0 is 40,000 characters, above the limit of 32,768"),
        (["exec", "c" * 129, "--", "true"], "CONTAINER_ID: "),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = runner.invoke(app, [args[0], *NOWHERE, "-o", "json", *args[1:]])  # options before `--`
    assert done.exit_code == 2, done.output
    error = json.loads(done.stdout)["error"]
    assert message in error["message"]
    assert error["kind"] == "invalid_input"


def test_logs_tail_out_of_range_is_a_usage_error() -> None:
    done = runner.invoke(app, ["container", "logs", "c1", "--tail", "-1", *NOWHERE])
    assert done.exit_code == 2


def test_durations() -> None:
    assert [seconds("30s"), seconds("5m"), seconds("1h"), seconds("2.5")] == [30.0, 300.0, 3600.0, 2.5]
