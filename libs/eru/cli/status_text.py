"""`eru status` as text (the `eru.cli/status` document printed as a table, docs/cli.md)."""

from __future__ import annotations

from typing import Any

from eru.cli.bus_client import console, number

_COLOURS = {
    "up": "green",
    "ready": "green",
    "starting": "yellow",
    "degraded": "yellow",
    "down": "red",
    "missing": "red",
}


def _state(value: str) -> str:
    return f"[{_COLOURS.get(value, 'yellow')}]{value}[/]"


def _service_of(process: str) -> str:
    """The service a stack process runs: `node-agent-sim` → `node-agent`, `allocator-2` → `allocator`."""
    if process.startswith("node-agent"):
        return "node-agent"
    name, _, index = process.rpartition("-")
    return name if name and index.isdigit() else process


def print_status(doc: dict[str, Any]) -> None:
    """`eru status` as text: one table of servers and replicas (a crash-looping process in its service's rows),
    then a line per process the supervisor gave up on or that is crash-looping, with its last error line."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="eru status")
    for column in ("component", "replica", "version", "state", "restarts", "metrics", "detail"):
        table.add_column(column, overflow="fold")
    nats, postgres = doc["nats"], doc["postgres"]
    nats_restarts, postgres_restarts = (str(server.get("restarts", "")) for server in (nats, postgres))
    table.add_row("nats", "", "", _state(nats["state"]), nats_restarts, "", nats["detail"] or nats["url"])
    for server in nats.get("servers", []):
        table.add_row("nats", server["name"], "", _state(server["state"]), "", "", server["address"])
    if nats.get("streams"):
        from eru.stack.cluster import describe_placement

        table.add_row("nats", "streams", "", "", "", "", describe_placement(nats["streams"]))
    table.add_row(
        "postgres",
        "",
        postgres["version"],
        _state(postgres["state"]),
        postgres_restarts,
        "",
        postgres["detail"] or postgres["dsn"],
    )
    looping = doc.get("crash_looping", {})
    for service in doc["services"]:
        for name, entry in looping.items():
            if _service_of(name) == service["name"]:
                detail = f"crash-looping: {entry.get('last_error') or entry['reason']}"
                table.add_row(service["name"], name, "", _state("down"), "", "", escape(detail))
        if not service["instances"] and not any(_service_of(name) == service["name"] for name in looping):
            table.add_row(service["name"], "", "", _state("missing"), "", "", "no replica answered $SRV.STATS")
        for entry in service["instances"]:
            restarts = "" if entry["restarts"] is None else number(entry["restarts"])
            load = ", ".join(f"{key}={number(value)}" for key, value in entry["stats"].items())
            table.add_row(
                service["name"],
                entry["replica"],
                entry["version"],
                _state(entry["state"]),
                restarts,
                entry["metrics_url"] or "",
                load,
            )
        for consumer in service.get("consumers", []):
            if consumer["state"] == "degraded":
                reasons = "; ".join(consumer["reasons"])
                table.add_row(service["name"], "", "", _state("degraded"), "", "", f"{consumer['name']}: {reasons}")
    console.print(table)
    for name, reason in doc["gave_up"].items():
        error = looping.get(name, {}).get("last_error")
        said = f"{reason}; last error: {error}" if error else reason
        line = f"[red]supervisor gave up on {escape(name)}[/]: {escape(said)} (see `eru logs {name}`)"
        console.print(line, highlight=False)
    for name, entry in looping.items():
        if name not in doc["gave_up"]:
            error = entry.get("last_error")
            said = f"{entry['reason']}; last error: {error}" if error else entry["reason"]
            line = f"[red]{escape(name)} is crash-looping[/]: {escape(said)} (see `eru logs {name}`)"
            console.print(line, highlight=False)
    if doc["console_url"]:
        console.print(f"console: {doc['console_url']}")
