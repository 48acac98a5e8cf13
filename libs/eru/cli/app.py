"""The `eru` command line: one typer app; each command group lives in its own module."""

from __future__ import annotations

import typer

app = typer.Typer(name="eru", help="eru: an event-driven container orchestrator.", no_args_is_help=True)


def main() -> None:
    """Entry point of the `eru` console script."""
    import os

    from eru.cli import commands  # noqa: F401  (registers the commands on `app`)
    from eru.logging import configure_logging

    # The CLI talks to people: library log lines only when asked for (ERU_LOG_LEVEL=info|debug).
    configure_logging("cli", "cli", log_format="console", level=os.environ.get("ERU_LOG_LEVEL", "warning"))

    app()
