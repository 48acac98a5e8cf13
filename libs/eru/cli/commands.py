"""Imports every command module so that each registers itself on the typer app."""

from eru.cli import stack_commands  # noqa: F401
