"""Memory of evictions in batch placement (docs/colocation.md "Memory of evictions"): the allocator's shell.

For a batch request the pod's recent evictions (table `evictions`, kept by `keeper.py`) and PostgreSQL's `now` are
read once per transaction; the pure `eru.colocation.placement_memory` decides which nodes the workload avoids. The
avoided nodes are left out of the placement, and the decision records the history, `now` and the back-off settings
(so `eru replay` re-runs the avoidance) and answers, per node, why (`"avoided": {"n2": "evicted web-batch 4 min ago,
back-off 10 min"}`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eru.colocation import placement_memory
from eru.colocation.backoff import Avoidance, Eviction, KeepConfig, avoided_nodes
from eru.planning import NodeResources
from eru.store.transaction import Connection

RECENT_SQL = """
SELECT workload, lineage, node, at, extract(epoch FROM now())::float8 AS now FROM evictions
 WHERE pod = $1 AND at > extract(epoch FROM now()) - $2
 ORDER BY at
"""
NOW_SQL = "SELECT extract(epoch FROM now())::float8"


@dataclass(frozen=True)
class PodMemory:
    """A pod's recent evictions at `now`."""

    now: float
    history: tuple[Eviction, ...]
    config: KeepConfig


@dataclass(frozen=True)
class RequestMemory:
    """What one batch request's decision records and avoids."""

    fields: dict[str, Any]
    avoided: dict[str, Avoidance]


async def load(conn: Connection, pod: str, config: KeepConfig) -> PodMemory:
    """The pod's evictions within the decay, and the transaction's `now`."""
    rows = await conn.fetch(RECENT_SQL, pod, config.avoid_decay_seconds)
    now = float(rows[0]["now"]) if rows else float(await conn.fetchval(NOW_SQL))
    history = tuple(Eviction(r["workload"], r["lineage"], r["node"], float(r["at"])) for r in rows)
    return PodMemory(now, history, config)


def for_request(memory: PodMemory | None, workload: str) -> RequestMemory | None:
    """The fields and avoided nodes of one batch request of `workload` (None without a memory)."""
    if memory is None:
        return None
    history = [e for e in memory.history if e.workload == workload]
    fields = placement_memory.problem_fields(workload, memory.now, history, memory.config)
    return RequestMemory(fields, avoided_nodes(history, workload, memory.now, memory.config))


def nodes_left(nodes: Sequence[NodeResources], memory: RequestMemory | None) -> list[NodeResources]:
    """`nodes` without those the memory avoids."""
    return list(nodes) if memory is None else placement_memory.without_avoided(nodes, memory.avoided)


def recorded(problem: str, memory: RequestMemory | None) -> str:
    """The decision's input (JSON text) with the memory's fields."""
    if memory is None:
        return problem
    return problem[:-1] + ", " + json.dumps(memory.fields)[1:]


def answered(output: dict[str, Any], memory: RequestMemory | None) -> dict[str, Any]:
    """The decision's answer with the avoided nodes and why."""
    if memory is not None and memory.avoided:
        output["avoided"] = placement_memory.explain(memory.avoided)
    return output
