"""The operator contract of every verb (docs/cli.md, "Exit codes" and "Errors"): each accepts `-o json|yaml`; a
failure with `-o json` is the `eru.cli/error` document on stdout, else one line on stderr, never wrapped when stdout
or stderr is not a terminal; one exit code per kind of failure; `eru down` with nothing running succeeds. The verbs
are read from the typer app, so a new verb is covered without touching this file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eru.cli.app import app
from eru.testing.cli_walk import leaf_commands, lookup_commands

ERU = [sys.executable, "-m", "eru.cli"]
runner = CliRunner()


def _eru(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ERU, *args], capture_output=True, text=True, timeout=120, check=False, env=_env(env))


def _env(extra: dict[str, str]) -> dict[str, str]:
    import os

    return {**os.environ, "ERU_OUTPUT": "text", **extra}


def test_the_walk_finds_every_verb() -> None:
    found = {path for path, _ in leaf_commands()}
    assert {"up", "down", "replay", "events replay", "events show", "deploy", "deploy watch", "plan"} <= found
    assert {"sim qos", "sim colocation", "container inspect", "tenant credentials", "console", "console url"} <= found
    assert len(found) >= 45
    lookups = {path for path, _ in lookup_commands()}
    assert {"replay", "explain", "events show", "deploy status", "deploy watch", "container inspect"} <= lookups
    assert {"container rm", "node cordon", "tenant rm", "dlq show"} <= lookups


@pytest.mark.parametrize("path", sorted(path for path, _ in leaf_commands()))
def test_every_verb_accepts_output_json_and_yaml(path: str) -> None:
    command = dict(leaf_commands())[path]
    options = {name for param in command.params for name in param.opts}
    assert {"-o", "--output"} <= options, f"eru {path} has no -o/--output (docs/cli.md: every verb takes -o json|yaml)"
    [output] = [param for param in command.params if "-o" in param.opts]
    assert output.envvar == "ERU_OUTPUT"
    choices = {member.value for member in output.type_descriptor.annotation}
    assert {"json", "yaml"} <= choices


def test_one_exit_code_per_kind_and_error_codes_map_to_kinds() -> None:
    from eru.cli.failure import EXIT_CODES, CliError, Kind, kind_of
    from eru.errors import InvalidInput, NotFound

    assert {
        Kind.refused: 1,
        Kind.invalid_input: 2,
        Kind.unavailable: 3,
        Kind.not_found: 4,
        Kind.internal: 5,
        Kind.interrupted: 130,
    } == EXIT_CODES
    assert len(set(EXIT_CODES.values())) == len(EXIT_CODES)
    assert CliError.of(NotFound("container_ids[0]", "unknown container 'x'")).exit_code == 4
    assert CliError.of(InvalidInput("count", "must be at least 1")).exit_code == 2
    assert CliError.of(InvalidInput("count", "must be at least 1")).field == "count"
    assert CliError.of(RuntimeError("boom")).kind is Kind.internal
    assert [kind_of(code) for code in ("timeout", "no_responders", "bus_unavailable", "store_unavailable")] == [
        Kind.unavailable
    ] * 4
    assert [kind_of(code) for code in ("insufficient_resource", "conflict", "permission_denied")] == [Kind.refused] * 3
    assert kind_of("not_recorded") is Kind.not_found


def test_a_failure_with_o_json_is_an_error_document_on_stdout(tmp_path: Path) -> None:
    nowhere = str(tmp_path / "nowhere")
    # in-process, verbs that fail before reaching a bus (run_async would bind structlog to CliRunner's stream)
    for verb in (["node", "ls"], ["events", "show", "some-id"], ["deploy", "status", "x"]):
        done = runner.invoke(app, [*verb, "-o", "json", "--state-dir", nowhere])
        doc = json.loads(done.stdout)
        assert doc["schema"] == "eru.cli/error", verb
        assert doc["error"]["exit_code"] == done.exit_code != 0, verb
        assert {"kind", "code", "message", "field"} <= set(doc["error"]), verb
    done = runner.invoke(app, ["node", "ls", "-o", "yaml", "--state-dir", nowhere])
    assert done.exit_code == 2
    assert "schema: eru.cli/error" in done.stdout
    assert "kind: invalid_input" in done.stdout


def test_a_refused_deploy_with_o_json_prints_the_error_document(tmp_path: Path) -> None:
    done = runner.invoke(app, ["deploy", "--pod", "p", "--image", "i", "--count", "0", "-o", "json"])
    assert done.exit_code == 2
    error = json.loads(done.stdout)["error"]
    assert (error["kind"], error["exit_code"]) == ("invalid_input", 2)
    assert "--count must be at least 1" in error["message"]


def test_usage_errors_are_error_documents_too() -> None:
    done = _eru("replay", "an-id", "--no-such-option", "-o", "json")
    assert done.returncode == 2
    error = json.loads(done.stdout)["error"]
    assert (error["kind"], error["code"]) == ("invalid_input", "usage")
    assert "--no-such-option" in error["message"]
    plain = _eru("events", "replay", "--no-such-option")
    assert plain.returncode == 2
    assert plain.stdout == ""
    assert "No such option: --no-such-option" in plain.stderr


def test_replay_and_events_replay_accept_o_json(tmp_path: Path) -> None:
    # no such option before: exit 2 `No such option: -o`; now both reach the bus and fail as unavailable (exit 3)
    for verb in (["replay", "some-id"], ["events", "replay", "--since", "10m"]):
        done = _eru(*verb, "-o", "json", "--nats", "nats://127.0.0.1:1", "--state-dir", str(tmp_path))
        error = json.loads(done.stdout)["error"]
        assert (done.returncode, error["kind"]) == (3, "unavailable"), (verb, done.stdout, done.stderr)


def test_a_long_error_is_one_line_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 120) / ("e" * 120) / ("f" * 120)
    done = _eru("node", "ls", "--state-dir", str(deep))
    assert done.returncode == 2
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert len(lines[0]) > 400
    assert str(deep) in lines[0]


def test_a_wide_table_is_not_folded_or_cut_when_stdout_is_not_a_terminal() -> None:
    # every verb prints its tables through eru.cli.bus_client.console (before: folded at 170 columns)
    name = "node-" + "x" * 300
    row = {"name": name, "pod": "p", "state": "up", "cpu_map": {"0": 100}, "used_cpu_map": {}, "memory": 1 << 30,
           "used_memory": 0, "containers": 0}  # fmt: skip
    table = "from eru.cli.bus_client import console\nfrom eru.cli.node_commands import node_table\n"
    table += f"console.print(node_table([{row!r}]))\nconsole.rule('the end')\n"
    done = subprocess.run([sys.executable, "-c", table], capture_output=True, text=True, timeout=60, check=True)
    assert name in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) < 1000  # a rule is short, not the console's width
    # `eru up` prints its summary through the same kind of console (before: rich's default, cut at 80 columns)
    line = "a stack line " * 40
    up = f"from eru.cli.consoles import make_console\nmake_console().print({line!r})\n"
    done = subprocess.run([sys.executable, "-c", up], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == line.strip()


def test_down_with_nothing_running_succeeds(tmp_path: Path) -> None:
    done = runner.invoke(app, ["down", "--state-dir", str(tmp_path)])
    assert done.exit_code == 0, done.output
    assert "nothing running" in done.stdout
    again = runner.invoke(app, ["down", "--state-dir", str(tmp_path), "-o", "json"])
    assert again.exit_code == 0
    assert json.loads(again.stdout)["nothing_running"] is True


def test_an_unexpected_error_is_internal_without_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    code = (
        "import sys\nimport eru.cli.sim_commands as sim\n"
        "def boom(*a, **k):\n    raise RuntimeError('bug in here')\n"
        "sim.console.print = boom\n"
        "sys.argv = ['eru', 'sim', 'drf', '--scale', '1', '-o', 'json', '--out', '/tmp/eru-sim-contract']\n"
        "from eru.cli.app import main\nmain()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 5, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["kind"] == "internal"
    assert "bug in here" in error["message"]
    assert "Traceback" not in done.stderr
