"""Imports every command module so that each registers itself on the typer app."""

from eru.cli import (
    events_commands,  # noqa: F401
    plan_commands,  # noqa: F401
    stack_commands,  # noqa: F401
)
