"""The CLI starts fast: importing it pulls in no bus, HTTP, database or numeric library, nor any service; `eru VERB`
loads only its own module; `eru --help` lists every verb from `app.VERBS` (docs/cli.md, "Fast start")."""

from __future__ import annotations

import json
import subprocess
import sys

from typer.main import get_command

from eru.cli import commands  # noqa: F401  (registers every verb)
from eru.cli.app import VERBS, app

HEAVY = ("nats", "aiohttp", "asyncpg", "numpy", "structlog", "rich", "yaml", "eru_", "eru.bus", "eru.store")


def _imported_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nimport json\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return list(json.loads(result.stdout.splitlines()[-1]))


def _heavy(modules: list[str]) -> list[str]:
    return [name for name in modules if name.startswith(HEAVY) and not name.startswith("eru.cli")]


def test_importing_the_cli_app_and_every_command_module_imports_nothing_heavy() -> None:
    assert _heavy(_imported_after("import eru.cli.app")) == []
    assert _heavy(_imported_after("import eru.cli.commands")) == []


def test_help_and_plan_import_only_what_they_need() -> None:
    help_run = "sys.argv = ['eru', '--help']\nfrom eru.cli.app import main\n"
    help_run += "try:\n    main()\nexcept SystemExit:\n    pass"
    loaded = _imported_after(help_run)
    assert [name for name in loaded if name.endswith("_commands")] == []  # the verb list comes from VERBS
    assert _heavy(loaded) == []
    plan_help = help_run.replace("'--help'", "'plan', '--help'")
    assert [name for name in _imported_after(plan_help) if name.endswith("_commands")] == ["eru.cli.plan_commands"]


def test_every_registered_verb_is_listed_in_verbs_with_its_module() -> None:
    group = get_command(app)
    registered = set(group.commands)  # type: ignore[attr-defined]
    assert registered == set(VERBS), f"add one line per verb to eru.cli.app.VERBS: {registered ^ set(VERBS)}"
    for verb, (module, summary) in VERBS.items():
        command = group.commands[verb]  # type: ignore[attr-defined]
        assert (
            command.callback is None
            or command.callback.__module__ == f"eru.cli.{module}"
            or module in str(command.callback.__module__)
        ), verb
        assert summary.endswith("."), verb


def test_eru_help_lists_every_verb_with_its_summary() -> None:
    result = subprocess.run([sys.executable, "-m", "eru.cli", "--help"], capture_output=True, text=True, check=True)
    for verb in VERBS:
        assert f"  {verb} " in result.stdout, verb
    assert "ERU_STATE_DIR" in result.stdout
    assert "ERU_BUS_URL" in result.stdout
