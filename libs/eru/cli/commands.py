"""Imports every command module so that each registers itself on the typer app."""

from eru.cli import (
    console_commands,  # noqa: F401
    container_commands,  # noqa: F401
    demo_commands,  # noqa: F401
    deploy_commands,  # noqa: F401
    dlq_commands,  # noqa: F401
    events_commands,  # noqa: F401
    exec_commands,  # noqa: F401
    explain_commands,  # noqa: F401
    logs_commands,  # noqa: F401
    node_commands,  # noqa: F401
    plan_commands,  # noqa: F401
    reconcile_commands,  # noqa: F401
    replay_commands,  # noqa: F401
    reservation_commands,  # noqa: F401
    run_commands,  # noqa: F401
    sim_colocation_commands,  # noqa: F401
    sim_commands,  # noqa: F401
    stack_commands,  # noqa: F401
    storage_commands,  # noqa: F401
    tenant_commands,  # noqa: F401
    workload_commands,  # noqa: F401
    workload_replace_commands,  # noqa: F401
)
