"""The `eru workload` command group, shared by every module that adds workload verbs (`workload_replace_commands`:
replace, history). Importing it registers the group once."""

from __future__ import annotations

from eru.cli.app import app, group

WORKLOAD_HELP = "Workloads: rolling replace, the images one has run."
workload_app = group(WORKLOAD_HELP, no_args_is_help=True)
app.add_typer(workload_app, name="workload")
