"""Node filters (docs/placement-modes.md "Node filters"), pure: which nodes of the pod a deploy request may use at all.

A filter has three parts, all of which a node must pass: `nodes` (only these, `--nodes n1,n2`), `exclude_nodes` (not
these, `--exclude-nodes n3`) and `labels` (every `KEY=VALUE` must match the node's effective labels, the agent's
overlaid by the operator's; `--node-label`, repeatable). It is applied before anything else in the decision's first
step (`eru.planning.decide.stage`), so every placement mode sees only matching nodes and `global` / `each` count the
instances on matching nodes only. A node the filter leaves out is named with the reason `filtered` and the part that
left it out (`not in --nodes`, `excluded by --exclude-nodes`, `label disk=ssd does not match (disk=hdd)`).

A filter naming a node the pod does not have, or matching no node of the pod, is refused (`InvalidInput` naming the
part, as `node_filter.nodes`, `node_filter.exclude_nodes`, `node_filter.labels` or `node_filter`): the request is
malformed for that pod, nothing is decided.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from eru.errors import InvalidInput
from eru.planning.left_out import LeftOut

FIELDS = ("nodes", "exclude_nodes", "labels")
"""The parts of a filter, as the request and an `eru plan` problem name them."""
OPTIONS = {"nodes": "--nodes", "exclude_nodes": "--exclude-nodes", "labels": "--node-label"}
"""The `eru deploy` option of each part."""
MAX_NAMED = 5
"""Unknown nodes named in a refusal (the others counted)."""


@dataclass(frozen=True, slots=True)
class NodeFilter:
    """A deploy request's node filter; an empty part does not filter."""

    nodes: frozenset[str] = frozenset()
    exclude_nodes: frozenset[str] = frozenset()
    labels: tuple[tuple[str, str], ...] = ()
    """`(key, value)` pairs, sorted by key."""

    def __bool__(self) -> bool:
        return bool(self.nodes or self.exclude_nodes or self.labels)

    def to_dict(self) -> dict[str, Any]:
        """The request's and the record's form: `{"nodes": [...], "exclude_nodes": [...], "labels": {...}}`, the
        empty parts left out."""
        out: dict[str, Any] = {}
        if self.nodes:
            out["nodes"] = sorted(self.nodes)
        if self.exclude_nodes:
            out["exclude_nodes"] = sorted(self.exclude_nodes)
        if self.labels:
            out["labels"] = dict(self.labels)
        return out

    def why_not(self, name: str, labels: Mapping[str, str]) -> str | None:
        """Why the filter leaves the node out (the first part it fails), None when the node matches."""
        if self.nodes and name not in self.nodes:
            return "not in --nodes"
        if name in self.exclude_nodes:
            return "excluded by --exclude-nodes"
        for key, value in self.labels:
            if labels.get(key) != value:
                has = f"{key}={labels[key]}" if key in labels else f"no label {key}"
                return f"label {key}={value} does not match ({has})"
        return None

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether the node passes every part."""
        return self.why_not(name, labels) is None


def node_filter(
    nodes: Iterable[str] = (), exclude_nodes: Iterable[str] = (), labels: Mapping[str, str] | None = None
) -> NodeFilter:
    """A filter from its parts (labels sorted by key)."""
    return NodeFilter(frozenset(nodes), frozenset(exclude_nodes), tuple(sorted((labels or {}).items())))


def filtered(name: str, why: str) -> LeftOut:
    """A node the request's filter leaves out."""
    return LeftOut(name, "filtered", f"filtered: {why}", f"{name} {why}", {})


def check(spec: NodeFilter, labels: Mapping[str, Mapping[str, str]], pod: str = "") -> None:
    """Refuse a filter naming nodes the pod does not have, or matching none of its nodes (`labels`: every node of
    the pod → its effective labels), with `InvalidInput` naming the part."""
    where = f"pod {pod!r}" if pod else "the problem"
    for part, named in (("nodes", spec.nodes), ("exclude_nodes", spec.exclude_nodes)):
        unknown = sorted(named - labels.keys())
        if unknown:
            shown = ", ".join(unknown[:MAX_NAMED]) + (
                f" … and {len(unknown) - MAX_NAMED} more" if unknown[MAX_NAMED:] else ""
            )
            noun = "node" if len(unknown) == 1 else "nodes"
            raise InvalidInput(f"node_filter.{part}", f"unknown {noun} {shown} (not in {where})", unknown=unknown[:100])
    if any(spec.matches(name, node_labels) for name, node_labels in labels.items()):
        return
    for key, value in spec.labels:
        if not any(node_labels.get(key) == value for node_labels in labels.values()):
            raise InvalidInput("node_filter.labels", f"{key}={value} matches no node of {where}")
    if spec.labels and not any(node_filter(labels=dict(spec.labels)).matches(n, ls) for n, ls in labels.items()):
        pairs = " ".join(f"{key}={value}" for key, value in spec.labels)
        raise InvalidInput("node_filter.labels", f"{pairs} together match no node of {where}")
    if (spec.nodes or labels.keys()) <= spec.exclude_nodes:
        left = "--nodes names" if spec.nodes else f"{where} has"
        raise InvalidInput("node_filter.exclude_nodes", f"excludes every node {left}")
    raise InvalidInput("node_filter", f"{describe(spec)} matches no node of {where}")


def describe(spec: NodeFilter) -> str:
    """The filter as options: `--nodes n1,n2 --exclude-nodes n3 --node-label disk=ssd`."""
    parts = []
    if spec.nodes:
        parts.append(f"--nodes {','.join(sorted(spec.nodes))}")
    if spec.exclude_nodes:
        parts.append(f"--exclude-nodes {','.join(sorted(spec.exclude_nodes))}")
    parts += [f"--node-label {key}={value}" for key, value in spec.labels]
    return "the filter " + " ".join(parts)


def parse(raw: Any, field_name: str = "node_filter") -> NodeFilter:
    """A problem's or a request's `"node_filter"` (`InvalidInput` naming the field)."""
    if raw is None:
        return NodeFilter()
    if not isinstance(raw, Mapping):
        raise InvalidInput(field_name, f"expected an object with {', '.join(FIELDS)}, got {type(raw).__name__}")
    unknown = set(raw) - set(FIELDS)
    if unknown:
        raise InvalidInput(
            f"{field_name}.{sorted(map(str, unknown))[0]}", f"unknown field (known: {', '.join(FIELDS)})"
        )
    names: dict[str, list[str]] = {}
    for part in ("nodes", "exclude_nodes"):
        value = raw.get(part, [])
        if not isinstance(value, list) or not all(isinstance(name, str) and name for name in value):
            raise InvalidInput(f"{field_name}.{part}", f"expected a list of node names, got {value!r}")
        names[part] = value
    labels = raw.get("labels", {})
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and k and isinstance(v, str) for k, v in labels.items()
    ):
        raise InvalidInput(f"{field_name}.labels", f"expected an object of label → value, got {labels!r}")
    return node_filter(names["nodes"], names["exclude_nodes"], labels)


def parse_labels(raw: Any, field_name: str = "node_labels") -> dict[str, dict[str, str]]:
    """A problem's `"node_labels"`: node → its effective labels (`InvalidInput` naming the field)."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(field_name, f"expected an object of node name → labels, got {type(raw).__name__}")
    out = {}
    for name, labels in raw.items():
        if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
            raise InvalidInput(f"{field_name}.{name}", f"expected an object of label → value, got {labels!r}")
        out[str(name)] = {str(k): v for k, v in labels.items()}
    return out


__all__ = ["FIELDS", "OPTIONS", "NodeFilter", "check", "describe", "filtered", "node_filter", "parse", "parse_labels"]
