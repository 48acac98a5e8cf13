"""The node filter options of `eru deploy` and `eru plan` (`--nodes`, `--exclude-nodes`, `--node-label`) and the
label items of `eru node set --label` (docs/cli.md, docs/placement-modes.md "Node filters"). A malformed one is
refused here, before anything is sent, with one line naming the option (exit 2)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from eru.cli.bus_client import fail

NodesOption = Annotated[
    list[str] | None,
    typer.Option("--nodes", help="Place only on these nodes: n1,n2 (repeatable); unknown names are refused."),
]
ExcludeNodesOption = Annotated[
    list[str] | None,
    typer.Option("--exclude-nodes", help="Never place on these nodes: n3,n4 (repeatable)."),
]
NodeLabelOption = Annotated[
    list[str] | None,
    typer.Option(
        "--node-label",
        help="Place only on nodes with this label, KEY=VALUE (repeatable: all must match; the agent's labels "
        "overlaid by the operator's).",
    ),
]
FILTER_OPTIONS = {
    "node_filter.nodes": "--nodes",
    "node_filter.exclude_nodes": "--exclude-nodes",
    "node_filter.labels": "--node-label",
    "node_filter": "--nodes/--exclude-nodes/--node-label",
}
"""The option behind each field of a node filter, for errors."""


def node_names(option: str, items: list[str] | None) -> list[str]:
    """`--nodes n1,n2 --nodes n3` → [n1, n2, n3]; an empty name is refused naming the option."""
    names: list[str] = []
    for item in items or ():
        parts = [part.strip() for part in item.split(",")]
        if not all(parts):
            fail(f"{option}: expected node names separated by commas, such as n1,n2 (got {item[:40]!r})", code=2)
        names += [part for part in parts if part not in names]
    return names


def label_pairs(option: str, items: list[str] | None) -> dict[str, str]:
    """`KEY=VALUE` items → {KEY: VALUE}; a missing `=`, an empty key or a key given twice with two values is refused
    naming the option."""
    labels: dict[str, str] = {}
    for item in items or ():
        key, equals, value = item.partition("=")
        if not equals or not key.strip() or key != key.strip():
            fail(f"{option}: expected KEY=VALUE, such as disk=ssd (got {item[:40]!r})", code=2)
        if key in labels and labels[key] != value:
            fail(f"{option}: {key[:40]} given twice ({labels[key][:40]}, {value[:40]})", code=2)
        labels[key] = value
    return labels


def node_filter(nodes: list[str] | None, exclude: list[str] | None, labels: list[str] | None) -> dict[str, Any] | None:
    """The request's `node_filter` from the options (None when none is given)."""
    spec: dict[str, Any] = {}
    if nodes:
        spec["nodes"] = node_names("--nodes", nodes)
    if exclude:
        spec["exclude_nodes"] = node_names("--exclude-nodes", exclude)
    if labels:
        spec["labels"] = label_pairs("--node-label", labels)
    return spec or None


def label_changes(items: list[str]) -> tuple[dict[str, str], list[str]]:
    """`eru node set --label` items: `KEY=VALUE` sets, `KEY-` removes (a key both set and removed is refused)."""
    removed = [item[:-1] for item in items if "=" not in item and item.endswith("-")]
    for key in removed:
        if not key:
            fail("--label: expected KEY=VALUE or KEY- (got '-')", code=2)
    set_items = [item for item in items if not ("=" not in item and item.endswith("-"))]
    for item in set_items:
        if "=" not in item:
            fail(f"--label: expected KEY=VALUE to set or KEY- to remove (got {item[:40]!r})", code=2)
    labels = label_pairs("--label", set_items)
    both = sorted(set(labels) & set(removed))
    if both:
        fail(f"--label: {both[0][:40]} is both set and removed", code=2)
    return labels, removed


__all__ = [
    "FILTER_OPTIONS",
    "ExcludeNodesOption",
    "NodeLabelOption",
    "NodesOption",
    "label_changes",
    "label_pairs",
    "node_filter",
    "node_names",
]
