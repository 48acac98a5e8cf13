"""Batch placement against reclaimed capacity (docs/colocation.md): a node's allowance bounds how many `batch` instances
fit.

The eviction service publishes each node's batch capacity in its `NodeCondition` (cores and bytes); the allocator
turns it into `NodeResources.batch_cpu` (pieces) / `batch_memory` (bytes). For a batch request, a node's capacity is
its ordinary capacity further bounded by ⌊batch_cpu / cpu_request⌋ and ⌊batch_memory / memory_request⌋ (a request of 0
or an allowance of None: no bound from that resource). Prod and mid requests ignore the allowance.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Any

from eru.errors import PlanningFailure
from eru.planning.request import MAX_BYTES, MAX_PIECES, NormalizedRequest
from eru.planning.resources import NodeResources

BATCH = "batch"
PRIORITY_CLASSES = ("prod", "mid", "batch")


def batch_bounds(node: NodeResources, request: NormalizedRequest) -> tuple[int | None, int | None]:
    """(CPU bound, memory bound) on the instances of `request` the node's batch allowance admits; None = no bound."""
    cpu = None
    if node.batch_cpu is not None and request.cpu_request > 0:
        cpu = max(0, node.batch_cpu) // request.cpu_request
    memory = None
    if node.batch_memory is not None and request.memory_request > 0:
        memory = max(0, node.batch_memory) // request.memory_request
    return cpu, memory


def batch_bound(node: NodeResources, request: NormalizedRequest) -> int | None:
    """How many instances of a batch `request` the node's allowance admits (None = unbounded, or not batch)."""
    if not request.batch:
        return None
    bounds = [bound for bound in batch_bounds(node, request) if bound is not None]
    return min(bounds) if bounds else None


def charge_batch(node: NodeResources, request: NormalizedRequest, count: int) -> NodeResources:
    """The node with `count` more instances of batch `request` taken from its allowance (never below 0); unchanged
    for other requests or nodes without an allowance."""
    if not request.batch or count <= 0 or (node.batch_cpu is None and node.batch_memory is None):
        return node
    cpu = None if node.batch_cpu is None else max(0, node.batch_cpu - count * request.cpu_request)
    memory = None if node.batch_memory is None else max(0, node.batch_memory - count * request.memory_request)
    return replace(node, batch_cpu=cpu, batch_memory=memory)


def charge_batch_placements(
    nodes: Sequence[NodeResources], request: NormalizedRequest, placements: Mapping[str, int]
) -> list[NodeResources]:
    """`nodes` after placing `placements` {node: instances} of batch `request`: see `charge_batch`."""
    if not request.batch:
        return list(nodes)
    return [charge_batch(node, request, placements.get(node.name, 0)) for node in nodes]


def check_batch_growth(
    node: NodeResources, before: Sequence[NormalizedRequest], after: Sequence[NormalizedRequest], share_base: int
) -> None:
    """Batch containers reallocated on `node` may grow (Σ new − old requests) only into its batch allowance; the
    allowance already counts what they hold. `PlanningFailure` naming the allowance otherwise; shrinking always fits."""
    cpu = sum(new.cpu_request - old.cpu_request for old, new in zip(before, after, strict=True))
    memory = sum(new.memory_request - old.memory_request for old, new in zip(before, after, strict=True))
    for resource, growth, allowance in (
        ("batch_cpu", cpu, node.batch_cpu),
        ("batch_memory", memory, node.batch_memory),
    ):
        if allowance is None or growth <= allowance:
            continue
        cores = resource == "batch_cpu"
        need = growth / share_base if cores else growth
        available = allowance / share_base if cores else allowance
        unit = " cores" if cores else " bytes"
        raise PlanningFailure(
            f"batch containers on node {node.name} would grow by {need:g}{unit}, its batch allowance is "
            f"{available:g}{unit}",
            code="insufficient_resource",
            node=node.name,
            limited_by=resource,
            need=need,
            available=available,
        )


def allowance_from_condition(condition: Any, share_base: int) -> tuple[int | None, int | None]:
    """(pieces, bytes) of batch allowance from a stored `NodeCondition` (JSON object); (None, None) when the node has
    no condition yet or it carries no usable figures (the node is then bounded only by its free resources).

    Cores round down to whole pieces, so the allowance never exceeds what was published."""
    if not isinstance(condition, Mapping):
        return None, None
    return _pieces(condition.get("batch_cpu_capacity"), share_base), _bytes(condition.get("batch_memory_capacity"))


def frees_batch_room(before: Any, after: Any) -> bool:
    """Whether a node's new condition `after` (stored JSON objects) may let a waiting batch request in where `before`
    did not: the forbid-schedule flags cleared or the batch capacity grew. A first condition only ever restricts
    (before it the node had no allowance), so it frees nothing."""
    if not isinstance(before, Mapping) or not isinstance(after, Mapping) or _forbids(after):
        return False
    if _forbids(before):
        return True
    old_cpu, old_memory = allowance_from_condition(before, 1_000_000)
    new_cpu, new_memory = allowance_from_condition(after, 1_000_000)
    return any(
        new is not None and (old is None or new > old) for old, new in ((old_cpu, new_cpu), (old_memory, new_memory))
    )


def _forbids(condition: Mapping[str, Any]) -> bool:
    return bool(condition.get("forbid_schedule_cpu") or condition.get("forbid_schedule_memory"))


def less_placed(allowance: tuple[int | None, int | None], cpu: int, memory: int) -> tuple[int | None, int | None]:
    """An allowance minus `cpu` pieces and `memory` bytes of batch instances placed since it was measured."""
    cpu_left, memory_left = allowance
    return (
        None if cpu_left is None else max(0, cpu_left - cpu),
        None if memory_left is None else max(0, memory_left - memory),
    )


def _pieces(cores: Any, share_base: int) -> int | None:
    if isinstance(cores, bool) or not isinstance(cores, int | float | str):
        return None
    try:
        amount = Decimal(str(cores)) * share_base
    except InvalidOperation:
        return None
    if not amount.is_finite():
        return None
    return min(MAX_PIECES, max(0, math.floor(amount)))


def _bytes(amount: Any) -> int | None:
    if isinstance(amount, bool) or not isinstance(amount, int | float) or not math.isfinite(amount):
        return None
    return min(MAX_BYTES, max(0, math.floor(amount)))
