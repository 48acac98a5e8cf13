"""The `eru` command line: one typer app; each command group lives in its own module.

Importing this module (and the command modules) stays cheap: no nats, aiohttp, asyncpg, numpy or services until a
verb needs them (docs/cli.md, "Fast start"; guarded by tests/unit/cli/test_cli_start.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import typer

HELP = """eru: an event-driven container orchestrator.

Every option can also be set by an environment variable: the shared ones have their own (ERU_STATE_DIR,
ERU_BUS_URL, ERU_DATABASE_URL, ERU_TIMEOUT, ERU_OUTPUT), every other one is ERU_<VERB>_<OPTION>, e.g.
ERU_DEPLOY_POD=web or ERU_UP_SIM_NODES=8 (docs/cli.md). Ctrl-C exits 130.

Every verb prints tables or lines for people, or a versioned document with -o json|yaml (a failure too: the
eru.cli/error document). Exit codes: 0 done, 1 refused, 2 invalid input, 3 unavailable, 4 not found, 5 internal,
130 interrupted (docs/cli.md). Cores print as a cpuset: `0:50 5` is 50 of core 0's 100 pieces plus all of core 5,
`-` none bound.
"""

# Plain (click) help and errors: typer's rich formatting imports rich + markdown-it (~150 ms) for every `--help`.
app = typer.Typer(
    name="eru",
    help=HELP,
    no_args_is_help=True,
    context_settings={"auto_envvar_prefix": "ERU", "show_default": True},
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """Keeps `eru` a group of verbs even when only one verb's module is loaded (see `main`)."""


def group(help: str, **settings: Any) -> typer.Typer:
    """A command group (`eru node …`) with the app's conventions: plain help, `no_args_is_help` unless told."""
    settings.setdefault("no_args_is_help", True)
    return typer.Typer(help=help, rich_markup_mode=None, pretty_exceptions_enable=False, **settings)


# verb → the module that registers it (one line per verb). `eru VERB …` imports only that module; `eru --help` lists
# these summaries without importing any (tests/unit/cli/test_cli_start.py checks that they match the real help).
VERBS: dict[str, tuple[str, str]] = {
    "up": ("stack_commands", "Start NATS, PostgreSQL and the four services; Ctrl-C stops everything."),
    "down": ("stack_commands", "Stop a stack started by `eru up`."),
    "status": ("stack_commands", "Health of NATS, PostgreSQL and every service replica (-o json)."),
    "provision": ("stack_commands", "Apply database migrations and streams, then exit."),
    "deploy": ("deploy_commands", "Deploy a workload, or follow a deploy."),
    "container": (
        "container_commands",
        "Containers: list, inspect, remove, realloc, replace, stop, start, restart, dissociate.",
    ),
    "workload": (
        "workload_commands",
        "Workloads: list, remove, stop, start, restart (every instance at once), rolling replace, history.",
    ),
    "exec": ("exec_commands", "Run a command inside a container; exit with its code."),
    "run": ("run_commands", "Run a command to its end in new containers: its output, its exit code."),
    "node": ("node_commands", "Nodes: capacity, usage, cpusets; add, resize, cordon."),
    "pod": ("node_commands", "Pods: named pools of nodes."),
    "tenant": ("tenant_commands", "Tenants: weight, quota and limit per resource; create, set, ls, rm, credentials."),
    "logs": ("logs_commands", "Show a service's log lines from the stack's log files; -f follows them."),
    "events": ("events_commands", "Show what the bus recorded: tail, replay a range, a deploy's story."),
    "console": ("console_commands", "The live web console: serve it, or print a one-time login URL."),
    "explain": ("explain_commands", "Why a deploy decision chose its nodes: per node, with the numbers."),
    "replay": ("replay_commands", "Re-run a recorded decision from its recorded input; exit 1 if it differs."),
    "dlq": ("dlq_commands", "Dead letters: list, show and redrive messages the services gave up on (operator)."),
    "reconcile": ("reconcile_commands", "Compare the ledger with what the nodes run; release lost containers."),
    "gc": ("storage_commands", "Apply retention now (--dry-run: show it): finished records to history, old dropped."),
    "plan": ("plan_commands", "Solve a planning problem: JSON in, JSON out, no services needed."),
    "sim": ("sim_commands", "Pure, fast experiments: QoS balance, DRF, cell compaction (tables + PNG plots)."),
    "demo": ("demo_commands", "The whole pipeline on a fresh embedded stack, then everything stops."),
}


def _verb(args: list[str]) -> str | None:
    """The first word that is not an option (the root takes no option with a value)."""
    return next((arg for arg in args if not arg.startswith("-")), None)


def _register(verb: str | None) -> None:
    """Import what `eru VERB` needs: its module only; everything for an unknown verb (typer's error lists them)."""
    import importlib

    if verb in VERBS:
        importlib.import_module(f"eru.cli.{VERBS[verb][0]}")
    elif verb is None:
        for name, (_, summary) in VERBS.items():  # `eru`, `eru --help`: the list of verbs, nothing imported

            def placeholder() -> None:
                """Never runs: a verb on the command line imports its real module instead."""

            app.command(name, help=summary, add_help_option=False)(placeholder)
    else:
        importlib.import_module("eru.cli.commands")


def unwritable_input(args: list[str], environ: Mapping[str, str]) -> str | None:
    """The first argument or `ERU_*` variable that is not UTF-8 text (an undecodable byte reaches Python as a lone
    surrogate, which no terminal, message or database can take), as `OPTION: reason`; None when all are text.

    Checked once for every verb before any of it runs, so that each one refuses such input in one line naming the
    option the user typed (exit 2), never with a UnicodeEncodeError somewhere later (docs/cli.md "Limits")."""
    from eru.bounded import clip, unencodable

    for index, arg in enumerate(args):
        reason = unencodable(arg)
        if reason is None:
            continue
        if arg.startswith("-") and "=" in arg:
            option, value = arg.split("=", 1)
            reason = unencodable(value) or reason
        elif index > 0 and args[index - 1].startswith("-") and "=" not in args[index - 1]:
            option = args[index - 1]
        else:
            option = f"argument {index + 1} '{clip(arg)}'"
        return f"{clip(option)}: {reason}"
    for name, value in environ.items():
        if name.startswith("ERU_") and (reason := unencodable(value)) is not None:
            return f"{clip(name)} (environment): {reason}"
    return None


def main() -> None:
    """Entry point of the `eru` console script. Every failure ends the same way (eru.cli.failure, docs/cli.md "Exit
    codes"): a usage error (exit 2) or an unexpected exception (exit 5, never a traceback) is the `eru.cli/error`
    document on stdout with `-o json|yaml`, one line on stderr otherwise; Ctrl-C on any verb exits 130."""
    import os
    import sys

    from typer._click import exceptions as click_errors  # typer's own click

    from eru.cli.failure import EXIT_CODES, CliError, Kind, format_in_args, report

    # The placement modes are element-wise integer numpy, never BLAS: without this, importing numpy starts an
    # OpenBLAS thread per core, ~100 ms of CPU on every `eru plan` (docs/cli.md, "Fast start"). An operator's own
    # setting wins.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    args = sys.argv[1:]
    unwritable = unwritable_input(args, os.environ)
    if unwritable is not None:
        sys.exit(report(CliError(Kind.invalid_input, unwritable), format_in_args(args)))
    _register(_verb(args))
    code: str | int | None
    try:
        # not standalone: click's own errors come here instead of printing themselves (typer turns a
        # KeyboardInterrupt inside a verb into exit code 130)
        returned = app(args=args, prog_name="eru", standalone_mode=False)
        code = returned if isinstance(returned, int) and not isinstance(returned, bool) else 0
    except (KeyboardInterrupt, typer.Abort):
        code = EXIT_CODES[Kind.interrupted]
    except click_errors.ClickException as error:
        fmt = format_in_args(args)
        if isinstance(error, click_errors.NoArgsIsHelpError) or fmt.value == "text":
            error.show()  # the usage line, a hint and `Error: …`, or the help of a verb given nothing
            code = error.exit_code
        else:
            code = report(CliError(Kind.invalid_input, error.format_message(), code="usage"), fmt)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, str | int) else None
    except Exception as error:  # bad input a verb let through: one line naming the field; a bug: never a traceback
        failure = CliError.of(error)
        if failure.kind is Kind.internal:
            _log_unexpected(error)
        code = report(failure, format_in_args(args))
    if code == EXIT_CODES[Kind.interrupted]:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        sys.stderr.write("eru: interrupted\n")
    sys.exit(code)


def _log_unexpected(error: BaseException) -> None:
    """The traceback of an unexpected error, for whoever asks for it (ERU_LOG_LEVEL=debug)."""
    import os

    if os.environ.get("ERU_LOG_LEVEL", "").lower() == "debug":
        import traceback

        traceback.print_exception(error)
