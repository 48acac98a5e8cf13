"""The `eru workload` command group, shared by every module that adds workload verbs (`workload_commands`: ls, rm,
stop, start, restart; `workload_replace_commands`: replace, history). Importing it registers the group once."""

from __future__ import annotations

from eru.cli.app import app, group

WORKLOAD_HELP = "Workloads: list, remove, stop, start, restart (every instance at once), rolling replace, history."
workload_app = group(WORKLOAD_HELP, no_args_is_help=True)
app.add_typer(workload_app, name="workload")
