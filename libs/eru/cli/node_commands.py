"""`eru node ls|add|set|cordon|uncordon` and `eru pod create|ls`: the nodes and pods the allocator knows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.app import app, group
from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    TimeoutOption,
    console,
    cores,
    cpuset,
    fail,
    nats_url,
    number,
    operation,
    query_all,
    refuse_invalid,
    run_with_bus,
)
from eru.cli.failure import typed_as
from eru.cli.output import Format, JsonOption, OutputOption, cell, chosen, document, emit, operation_document

if TYPE_CHECKING:
    from rich.table import Table

node_app = group("Nodes: capacity, usage, cpusets; add, resize, cordon.", no_args_is_help=True)
pod_app = group("Pods: named pools of nodes.", no_args_is_help=True)
app.add_typer(node_app, name="node")
app.add_typer(pod_app, name="pod")


def watermark_state(conditions: Any) -> str:
    """The eviction service's view of a node (docs/colocation.md): forbid / suppressed to X cores / evicting."""
    if not isinstance(conditions, dict) or not conditions:
        return "-"
    parts = []
    forbidden = [r for r in ("cpu", "memory") if conditions.get(f"forbid_schedule_{r}")]
    if forbidden:
        parts.append(f"forbid ({'+'.join(forbidden)})")
    allowed = conditions.get("batch_cpu_allowed")
    if allowed is not None:
        parts.append(f"suppressed to {float(allowed):g} cores")
    evicting = conditions.get("evicting") or []
    if evicting:
        parts.append(f"evicting {len(evicting)}")
    return ", ".join(parts) or str(conditions.get("state", "normal"))


def room_text(conditions: Any) -> str:
    """Batch room sized for the coming peak (docs/colocation.md): `6 cores (LS peak 20.5 cores over 60 min)`; while
    the samples span less than the horizon, how much of it they cover."""
    if not isinstance(conditions, dict) or conditions.get("room_cpu") is None:
        return "-"
    horizon = float(conditions.get("room_horizon_seconds") or 0)
    covered = float(conditions.get("room_covered_seconds") or 0)
    span = f"{horizon / 60:g} min" if covered >= horizon else f"{covered / 60:.0f} of {horizon / 60:g} min"
    peak = float(conditions.get("ls_cpu_peak") or 0)
    return f"{float(conditions['room_cpu']):g} cores (LS peak {peak:g} cores over {span})"


def overrides_text(overrides: Any) -> str:
    """A node's watermark overrides, its own and its pod's: `cpu_evict=70 (node), cpu_suppress=50 (pod)`; the node's
    win (docs/colocation.md)."""
    if not isinstance(overrides, dict):
        return "-"
    node, pod = overrides.get("node") or {}, overrides.get("pod") or {}
    parts = [f"{key}={value} (node)" for key, value in sorted(node.items())]
    parts += [f"{key}={value} (pod)" for key, value in sorted(pod.items()) if key not in node]
    return ", ".join(parts) or "-"


def reserved_text(row: dict[str, Any], share_base: int) -> str:
    """What tenants reserved on the node and what stays unreserved: `2 cores, 4.0GiB for a (6 cores, 12.0GiB)`."""
    from eru.units import format_bytes

    cpu, memory = float(row.get("reserved_cpu") or 0), int(row.get("reserved_memory") or 0)
    if not cpu and not memory:
        return "-"
    total_cpu = sum(row["cpu_map"].values()) / share_base
    left = f"{total_cpu - cpu:g} cores, {format_bytes(max(int(row['memory']) - memory, 0))}"
    return f"{cpu:g} cores, {format_bytes(memory)} for {row.get('reserved_for') or '?'} ({left})"


def requested_text(row: dict[str, Any]) -> str:
    """The cores the node's live containers request, bound or not (`cpu_requested`); `12 (oversold 1.5x)` when the
    requests exceed its cores (memory-prime CPU may be oversold); `-` from an allocator that does not send it."""
    requested, total = row.get("cpu_requested"), row.get("cpu_total")
    if requested is None:
        return "-"
    if total and float(requested) > float(total):
        return f"{float(requested):g} (oversold {float(requested) / float(total):.2g}x)"
    return f"{float(requested):g}"


def labels_text(row: dict[str, Any]) -> str:
    """The node's effective labels, `disk=ssd zone=a*` (`*`: set by an operator), clipped."""
    operator = row.get("operator_labels") or {}
    labels = {**(row.get("labels") or {}), **operator}
    text = " ".join(f"{key}={value}{'*' if key in operator else ''}" for key, value in sorted(labels.items()))
    return cell(text, 120) if text else "-"


def node_table(rows: list[dict[str, Any]]) -> Table:
    """Per node: state, capacity, bound and requested CPU, usage, the cpuset in use and the watermark state."""
    from rich.table import Table

    from eru.units import format_bytes

    table = Table(title="nodes")
    columns = (
        "node",
        "pod",
        "state",
        "cpu bound/total, requested",
        "memory used/total",
        "reserved (unreserved)",
        "containers",
        "cpus in use",
        "watermarks",
        "overrides",
        "batch room",
        "labels",
    )
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        share_base = int(row.get("share_base") or 100)
        state = row["state"] + (" cordoned" if row.get("cordoned") else "")
        bound = cores(sum(row["used_cpu_map"].values()), share_base)
        table.add_row(
            row["name"],
            row["pod"],
            state,
            f"{bound}/{cores(sum(row['cpu_map'].values()), share_base)}, {requested_text(row)}",
            f"{format_bytes(int(row['used_memory']))}/{format_bytes(int(row['memory']))}",
            reserved_text(row, share_base),
            str(row.get("containers", "")),
            cpuset(row["used_cpu_map"]),
            watermark_state(row.get("conditions")),
            overrides_text(row.get("watermark_overrides")),
            room_text(row.get("conditions")),
            labels_text(row),
        )
    return table


def parse_cpu_map(text: str) -> dict[str, int]:
    """`0=100,1=100` → {"0": 100, "1": 100}."""
    result: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        core, _, pieces = part.partition("=")
        if not core or not pieces.isdigit():
            fail(f"--cpu-map: expected core=pieces pairs such as 0=100,1=100, got {part!r}", code=2)
        result[core] = int(pieces)
    return result


@node_app.command("ls")
def node_ls(
    pod: Annotated[str | None, typer.Option(help="Only this pod's nodes.")] = None,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Every node with its capacity, usage and the cores in use (cpuset notation: `0 1 2:50`, docs/cli.md)."""
    from eru.domain.messages import QueryRequest

    reply = run_with_bus(
        nats_url(nats, state_dir), lambda nc: query_all(nc, QueryRequest(what="nodes", pod=pod), timeout)
    )
    fmt = chosen(output, as_json)
    if fmt is not Format.text:
        emit(document("node-ls", nodes=reply.rows), fmt)
        return
    console.print(node_table(reply.rows))


NODE_OPTIONS = {
    "node": "NAME",
    "pod": "--pod",
    "cpu_map": "--cpu-map",
    "memory": "--memory",
    "name": "NAME",
    "labels": "--label",
    "remove_labels": "--label",
}
WATERMARK_OPTIONS = {"name": "NAME", "set": "--watermark", "clear": "--watermark", "clear_all": "--clear-watermarks"}
"""The options behind the node and pod requests' fields, for errors (eru.cli.failure.typed_as)."""


def _set_node(nats: str | None, state_dir: Any, timeout: float, fmt: Format, **fields: Any) -> None:
    from pydantic import ValidationError

    from eru.domain.messages import SetNodeRequest

    typed_as(NODE_OPTIONS)
    try:
        request = SetNodeRequest(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as error:
        refuse_invalid(error, NODE_OPTIONS)
    url = nats_url(nats, state_dir)
    reply = run_with_bus(url, lambda nc: operation(nc, "set-node", request, timeout), NODE_OPTIONS)
    if fmt is not Format.text:
        emit(operation_document("node-set", reply), fmt)
        return
    console.print(reply.message)
    for warning in reply.warnings:
        console.print(f"[yellow]warning:[/] {warning}")


@node_app.command("add")
def node_add(
    name: str,
    pod: Annotated[str, typer.Option(help="The pod the node joins (created if needed).")],
    cpus: Annotated[int, typer.Option(help="Whole cores (each share_base pieces).")] = 0,
    cpu_map: Annotated[str | None, typer.Option(help="Cores as core=pieces pairs: 0=100,1=100.")] = None,
    memory: Annotated[str, typer.Option(help="Memory, e.g. 8GiB.")] = "0",
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Add a node by hand (a node agent registers its node by itself)."""
    mapping = parse_cpu_map(cpu_map) if cpu_map else {str(i): 100 for i in range(cpus)}
    _set_node(nats, state_dir, timeout, output, node=name, pod=pod, cpu_map=mapping, memory=memory)


WatermarkOption = Annotated[
    list[str] | None,
    typer.Option(
        "--watermark",
        help="A watermark override, key=percent (cpu_evict=70) or key- to clear it; repeat for more "
        "(docs/colocation.md).",
    ),
]
ClearWatermarksOption = Annotated[
    bool, typer.Option("--clear-watermarks", help="Drop every watermark override (before any --watermark).")
]


def set_watermarks(
    scope: str,
    name: str,
    items: list[str],
    clear_all: bool,
    nats: str | None,
    state_dir: Any,
    timeout: float,
    fmt: Format = Format.text,
) -> None:
    """Send one `watermarks` change (checked here first, so a typo never reaches the bus) and print the answer."""
    from eru.colocation.overrides import parse_watermark_items
    from eru.domain.messages import WatermarkRequest
    from eru.errors import InvalidInput

    typed_as(WATERMARK_OPTIONS)
    try:
        values, clear = parse_watermark_items(items)
    except InvalidInput as error:
        fail(error.message, code=2)
        return
    request = WatermarkRequest(scope=scope, name=name, set=values, clear=clear, clear_all=clear_all)
    reply = run_with_bus(nats_url(nats, state_dir), lambda nc: operation(nc, "watermarks", request, timeout))
    if fmt is not Format.text:
        emit(operation_document(f"{scope}-watermarks", reply, **{scope: name}), fmt)
        return
    console.print(reply.message, highlight=False)


@node_app.command("set")
def node_set(
    name: str,
    cpus: Annotated[int | None, typer.Option(help="Whole cores (each share_base pieces).")] = None,
    cpu_map: Annotated[str | None, typer.Option(help="Cores as core=pieces pairs: 0=100,1=100.")] = None,
    memory: Annotated[str | None, typer.Option(help="Memory, e.g. 8GiB.")] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            help="An operator label, KEY=VALUE, or KEY- to remove it; repeat for more. Kept beside the agent's "
            "labels (an agent re-registering keeps them); deploy --node-label matches both, the operator's first.",
        ),
    ] = None,
    watermark: WatermarkOption = None,
    clear_watermarks: ClearWatermarksOption = False,
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Change a node's resources (docs/planning.md; running containers are not touched), its operator labels
    (docs/placement-modes.md "Node filters") or its watermark overrides (docs/colocation.md: node override > pod
    override > the eviction service's environment)."""
    from eru.cli.node_filter_options import label_changes

    resources = cpus is not None or cpu_map is not None or memory is not None
    if watermark or clear_watermarks:
        if resources or label:
            fail("--watermark: change watermarks and resources in two commands (each is all or nothing)", code=2)
        set_watermarks("node", name, watermark or [], clear_watermarks, nats, state_dir, timeout, output)
        return
    labels, removed = label_changes(label or [])
    mapping = parse_cpu_map(cpu_map) if cpu_map else ({str(i): 100 for i in range(cpus)} if cpus else None)
    changes = {"labels": labels or None, "remove_labels": removed or None}
    _set_node(nats, state_dir, timeout, output, node=name, cpu_map=mapping, memory=memory, **changes)


def _cordon(name: str, cordoned: bool, nats: str | None, state_dir: Any, timeout: float, fmt: Format) -> None:
    from eru.domain.messages import CordonRequest

    typed_as(NODE_OPTIONS)
    request = CordonRequest(node=name, cordoned=cordoned)
    reply = run_with_bus(nats_url(nats, state_dir), lambda nc: operation(nc, "cordon", request, timeout))
    if fmt is not Format.text:
        emit(operation_document("node-cordon", reply, node=name, cordoned=cordoned), fmt)
        return
    console.print(reply.message)


@node_app.command("cordon")
def node_cordon(
    name: str,
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Place nothing new on the node."""
    _cordon(name, True, nats, state_dir, timeout, output)


@node_app.command("uncordon")
def node_uncordon(
    name: str,
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Place on the node again."""
    _cordon(name, False, nats, state_dir, timeout, output)


@pod_app.command("create")
def pod_create(
    name: str,
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Create a pod (nothing happens if it exists)."""
    from eru.domain.messages import PodRequest

    typed_as(NODE_OPTIONS)
    reply = run_with_bus(
        nats_url(nats, state_dir), lambda nc: operation(nc, "pod-create", PodRequest(name=name), timeout)
    )
    if output is not Format.text:
        emit(operation_document("pod-create", reply), output)
        return
    console.print(reply.message)


@pod_app.command("set")
def pod_set(
    name: str,
    watermark: WatermarkOption = None,
    clear_watermarks: ClearWatermarksOption = False,
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Change a pod's watermark overrides (docs/colocation.md): every node of the pod without its own override of a
    key takes the pod's."""
    if not watermark and not clear_watermarks:
        fail("--watermark: give at least one key=percent, key- or --clear-watermarks", code=2)
    set_watermarks("pod", name, watermark or [], clear_watermarks, nats, state_dir, timeout, output)


@pod_app.command("ls")
def pod_ls(
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 5.0,
) -> None:
    """Every pod with its number of nodes."""
    from eru.domain.messages import QueryRequest

    reply = run_with_bus(nats_url(nats, state_dir), lambda nc: query_all(nc, QueryRequest(what="pods"), timeout))
    fmt = chosen(output, as_json)
    if fmt is not Format.text:
        emit(document("pod-ls", pods=reply.rows), fmt)
        return
    from rich.table import Table

    table = Table(title="pods")
    for column in ("pod", "nodes", "cordoned", "created"):
        table.add_column(column)
    for row in reply.rows:
        table.add_row(row["name"], number(row["nodes"]), number(row["cordoned"]), row["created_at"][:19])
    console.print(table)
