"""Every command of the `eru` typer app, for tests that hold all verbs to one contract (docs/cli.md, "Exit codes"):
read from the app itself, so a verb added later is covered without touching the tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Verbs whose argument names something to create or a fixed choice, not something to look up: an unknown value is
# not "not found" for them.
NOT_LOOKUPS = frozenset({"node add", "pod create", "tenant create", "tenant credentials", "logs"})
# Verbs that refuse to send anything without one of their options (`pod set` changes nothing without a watermark):
# the walk gives them the least that reaches the lookup.
LEAST_OPTIONS: dict[str, list[str]] = {"pod set": ["--watermark", "cpu_evict=80"]}


def leaf_commands() -> Iterator[tuple[str, Any]]:
    """Every command that runs something (`node ls`, `plan`, and groups that run themselves: `deploy`, `console`),
    with its path."""
    from typer.main import get_command

    from eru.cli import commands  # noqa: F401  (registers every verb)
    from eru.cli.app import app

    def walk(command: Any, path: tuple[str, ...]) -> Iterator[tuple[str, Any]]:
        children = getattr(command, "commands", None)
        if children is None or (command.callback is not None and path):
            yield " ".join(path), command
        for name, child in (children or {}).items():
            yield from walk(child, (*path, name))

    yield from walk(get_command(app), ())


def lookup_commands() -> Iterator[tuple[str, Any]]:
    """The commands that look up what their required argument names (an id or a name), with `NOT_LOOKUPS` left out."""
    for path, command in leaf_commands():
        arguments = [p for p in command.params if p.param_type_name == "argument" and p.required]
        if arguments and path not in NOT_LOOKUPS:
            yield path, command


def unknown_arguments(command: Any) -> list[str]:
    """Command-line words naming nothing that exists, for the command's required arguments and options."""
    words: list[str] = []
    for param in command.params:
        if not param.required:
            continue
        annotation = param.type_descriptor.annotation
        value = "999999" if annotation is int else "no-such-thing"
        words += [value] if param.param_type_name == "argument" else [param.opts[0], value]
    return words


def least_options(path: str) -> list[str]:
    """What `path` needs besides its arguments to send its request at all (`LEAST_OPTIONS`)."""
    return list(LEAST_OPTIONS.get(path, []))
