"""Nodes and pods: registration and heartbeats from node agents, SetNode (docs/planning.md), cordon, pod creation.

Capacity changes never touch usage or running containers; a capacity below current usage is allowed (the node then
takes nothing new) and answered with a warning. Capacity changes take the pod lock, so no deploy plans against a
capacity that is being changed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from fractions import Fraction
from typing import Any

import structlog

from eru.domain import Heartbeat, NodeRegistration
from eru.domain.colocation import NodeCondition
from eru.domain.limits import LABELS_MAX
from eru.domain.messages import CordonRequest, OperationReply, PodRequest, SetNodeRequest
from eru.errors import InvalidInput, NotFound
from eru.fairness import TenantUsage
from eru.fairness.quantities import json_number
from eru.planning import PlanningConfig
from eru.planning.batch import frees_batch_room
from eru.store.nodes import NodeCapacity, NodeRecord, NodeStore
from eru.store.queries import QueryStore
from eru_allocator.admission import accounting

log = structlog.get_logger()


def _check_layout(cpu_map: dict[str, int], numa: dict[str, str], numa_memory: dict[str, int]) -> None:
    for core, pieces in cpu_map.items():
        if pieces < 0:
            raise InvalidInput(f"cpu_map.{core}", f"pieces must be ≥ 0, got {pieces}")
    for core in numa:
        if core not in cpu_map:
            raise InvalidInput(f"numa.{core}", f"core {core!r} is not in cpu_map")
    for numa_id, amount in numa_memory.items():
        if amount < 0:
            raise InvalidInput(f"numa_memory.{numa_id}", f"must be ≥ 0 bytes, got {amount}")


def check_registration(registration: NodeRegistration) -> None:
    """A registration's layout is consistent (pieces ≥ 0, NUMA cores in the map); else InvalidInput naming the
    field. Checked before a registration joins a batch, so a bad one fails alone."""
    _check_layout(registration.cpu_map, registration.numa, registration.numa_memory)


async def register(nodes: NodeStore, registration: NodeRegistration) -> None:
    """`register_many` of one registration."""
    await register_many(nodes, [registration])


async def register_many(nodes: NodeStore, registrations: Sequence[NodeRegistration]) -> None:
    """Node agents' registrations in one transaction: capacity recorded (the agent's engine is its source), usage
    left alone; a new node joins its agent's pod (created if needed), a known one stays in its pod. The pods'
    locks are taken in name order (two replicas' batches never deadlock), each once. At 5,000 nodes one
    transaction per registration under the pod lock wrote ~33 a second (docs/performance.md "Registrations a batch
    per transaction")."""
    for registration in registrations:
        check_registration(registration)
    if not registrations:
        return
    await nodes.register(
        [
            NodeCapacity(r.node, r.pod, r.cpu_map, r.memory, r.numa, r.numa_memory, r.share_base, r.labels)
            for r in registrations
        ]
    )
    for registration in registrations:
        log.info(
            "node.registered",
            node=registration.node,
            pod=registration.pod,
            cores=len(registration.cpu_map),
            memory=registration.memory,
        )


async def record_condition(nodes: NodeStore, condition: NodeCondition) -> None:
    """`record_conditions` of one condition."""
    await record_conditions(nodes, [condition])


async def record_conditions(nodes: NodeStore, conditions: Sequence[NodeCondition]) -> None:
    """Keep each node's newest condition (watermarks); older ones arriving late are ignored. When one frees batch
    room (forbid cleared, batch capacity grew), waiting requests of the node's pod get an admission pass."""
    if not conditions:
        return
    rows = await nodes.write_conditions(conditions)
    woken = sorted({row.pod for row in rows if frees_batch_room(row.before, row.after)})
    for pod in woken:
        await nodes.wake_admission(pod)


async def heartbeat(nodes: NodeStore, beat: Heartbeat) -> bool:
    """Mark a node alive; False when the node is unknown (its agent should register)."""
    return bool(await heartbeats(nodes, [beat]))


async def heartbeats(nodes: NodeStore, beats: Sequence[Heartbeat]) -> set[str]:
    """Mark the beats' nodes alive in one statement; the names of those known (an unknown node's agent should
    register)."""
    names = sorted({beat.node for beat in beats})
    if not names:
        return set()
    return await nodes.heartbeats(names)


def _warnings(node: NodeRecord) -> list[str]:
    warnings = []
    for core, used in node.used_cpu_map.items():
        capacity = node.capacity.cpu_map.get(core, 0)
        if used > capacity:
            warnings.append(f"core {core}: capacity {capacity} pieces is below its usage {used}")
    if node.used_memory > node.capacity.memory:
        warnings.append(f"memory: capacity {node.capacity.memory} bytes is below its usage {node.used_memory}")
    return warnings


def _changed(req: SetNodeRequest, current: NodeRecord | None) -> NodeRecord:
    """The node after `req` (capacity fields given replace the current ones; usage kept); `NotFound` for an unknown
    node without pod, cpu_map and memory, `InvalidInput` naming the field for a bad layout or labels."""
    if current is None:
        if req.pod is None or req.cpu_map is None or req.memory is None:
            raise NotFound("node", f"unknown node {req.node!r}: adding a node needs pod, cpu_map and memory")
        current = NodeRecord(NodeCapacity(req.node, req.pod, {}, 0))
    old = current.capacity
    capacity = NodeCapacity(
        req.node,
        req.pod or old.pod,
        dict(req.cpu_map if req.cpu_map is not None else old.cpu_map),
        req.memory if req.memory is not None else old.memory,
        dict(req.numa if req.numa is not None else old.numa),
        dict(req.numa_memory if req.numa_memory is not None else old.numa_memory),
        req.share_base if req.share_base is not None else old.share_base,
        dict(old.labels),
    )
    _check_layout(dict(capacity.cpu_map), dict(capacity.numa), dict(capacity.numa_memory))
    return replace(current, capacity=capacity, operator_labels=_operator_labels(req, current))


def _refuse_move_of_live(req: SetNodeRequest) -> Callable[[str, int], None]:
    def check(old_pod: str, live: int) -> None:
        if live:
            raise InvalidInput("pod", f"node {req.node!r} still runs {live} containers in pod {old_pod!r}")

    return check


async def set_node(nodes: NodeStore, req: SetNodeRequest) -> OperationReply:
    """Add a node or change its capacity (docs/planning.md): running containers and usage are untouched."""
    changed: list[NodeRecord] = []

    def change(current: NodeRecord | None) -> NodeRecord:
        changed.append(_changed(req, current))
        return changed[-1]

    current = await nodes.change_node(req.node, change, _refuse_move_of_live(req))
    warnings = _warnings(changed[-1])
    verb = "added" if current is None else "updated"
    log.info("node.set", node=req.node, pod=changed[-1].capacity.pod, action=verb, warnings=warnings)
    return OperationReply(message=f"node {req.node} {verb}", warnings=warnings)


def _operator_labels(req: SetNodeRequest, node: NodeRecord) -> dict[str, str]:
    """The node's operator labels after `req` (removals, then the labels set); `InvalidInput` naming the field when
    a removed key is not an operator label of the node or the effective labels would exceed the limit."""
    labels = dict(node.operator_labels)
    missing = [key for key in req.remove_labels or () if key not in labels]
    if missing:
        agent = [key for key in missing if key in node.capacity.labels]
        why = f" ({', '.join(agent)} {'is' if len(agent) == 1 else 'are'} the agent's)" if agent else ""
        raise InvalidInput("remove_labels", f"node {req.node!r} has no operator label {', '.join(missing)}{why}")
    for key in req.remove_labels or ():
        del labels[key]
    labels.update(req.labels or {})
    effective = {**node.capacity.labels, **labels}
    if len(effective) > LABELS_MAX:
        raise InvalidInput("labels", f"the node would have {len(effective)} labels, above the limit of {LABELS_MAX}")
    return labels


async def cordon(nodes: NodeStore, req: CordonRequest) -> OperationReply:
    """Exclude a node from new placements (or include it again)."""
    if not await nodes.set_cordoned(req.node, req.cordoned):
        raise NotFound("node", f"unknown node {req.node!r}")
    return OperationReply(message=f"node {req.node} {'cordoned' if req.cordoned else 'uncordoned'}")


async def create_pod(nodes: NodeStore, req: PodRequest) -> OperationReply:
    """Create a pod; creating an existing one is not an error."""
    created = await nodes.create_pod(req.name)
    return OperationReply(message=f"pod {req.name} {'created' if created else 'already exists'}")


async def node_rows(
    store: QueryStore,
    pod: str | None,
    node: str | None,
    down_after_seconds: float = 30.0,
    *,
    after: str | None = None,
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """Nodes with capacity, usage, reservations (cores, bytes, tenants) and live container counts, sorted by name
    (those named after `after`, at most `limit`). A node whose agent has been silent for `down_after_seconds` shows
    as `down` (the snapshot leaves it out the same way)."""
    result = []
    for listed in await store.node_page(pod, node, float(down_after_seconds), after, limit):
        item = listed.as_row()
        if listed.silent:
            item["state"] = "down"
        item.update(cpu_columns(item, listed.requests))
        item["effective_labels"] = {**item["labels"], **item["operator_labels"]}
        result.append(item)
    return result


def cpu_columns(node: dict[str, Any], requests: Sequence[Sequence[Any]]) -> dict[str, int | float]:
    """A node's CPU in cores (docs/fairness-and-scoring.md, "What is counted where"): `cpu_total` (Σ cpu_map),
    `cpu_bound` (cores held by cpusets: Σ used_cpu_map) and `cpu_requested` (what its live containers request, bound
    or not: memory-prime containers' CPU is not bound and may oversell the node, so it may exceed `cpu_total`).
    `requests` holds [stored resources, number of containers] pairs."""
    share_base = int(node.get("share_base") or 100)
    config = PlanningConfig(share_base=share_base)
    usage: dict[str, TenantUsage] = {}
    for resources, count in requests:
        accounting.add_held(usage, "", resources, int(count), config)
    requested = usage.get("", TenantUsage()).allocated.get("cpu", Fraction(0))
    total = Fraction(sum(int(v) for v in (node.get("cpu_map") or {}).values()), share_base)
    bound = Fraction(sum(int(v) for v in (node.get("used_cpu_map") or {}).values()), share_base)
    return {"cpu_total": json_number(total), "cpu_bound": json_number(bound), "cpu_requested": json_number(requested)}
