"""Each node's batch allowance in the allocator's snapshot (docs/colocation.md).

The allowance is the batch capacity of the node's newest `NodeCondition` (stored in `nodes.conditions`) less the
requests of batch instances the eviction service cannot have counted yet: those placed on the node after that
condition's `time`, and those still being created (`planned`, `creating`: not running, so not in its samples; if one
already runs on the node it is counted twice until its start is recorded, which errs on the safe side). A node
without a condition has no allowance (None): batch is bounded there by its free resources only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from eru.domain import ResourceRequest
from eru.errors import InvalidInput
from eru.planning import NodeResources, PlanningConfig, normalize_request
from eru.planning.batch import BATCH, allowance_from_condition, less_placed
from eru.store.transaction import Connection

PLACED_SINCE_CONDITION_SQL = """
SELECT c.node, c.resources FROM containers c JOIN node_status s ON s.name = c.node
 WHERE c.pod = $1 AND c.class = 'batch' AND c.state NOT IN ('removed', 'failed', 'lost') AND s.conditions ? 'time'
   AND (c.state IN ('planned', 'creating') OR c.created_at > to_timestamp((s.conditions->>'time')::float8))
"""


NODE_CONDITIONS_SQL = "SELECT name, s.conditions FROM nodes n JOIN node_status s USING (name) WHERE n.pod = $1"


def is_batch(request: Any) -> bool:
    """Whether a deploy request (a `DeployRequest` or its stored JSON object) is of priority class `batch`."""
    workload = request.get("workload") if isinstance(request, dict) else getattr(request, "workload", None)
    if isinstance(workload, dict):
        return workload.get("priority_class") == BATCH
    return getattr(workload, "priority_class", None) == BATCH


async def with_pod_allowances(
    conn: Connection, pod: str, nodes: Sequence[NodeResources], config: PlanningConfig
) -> list[NodeResources]:
    """`nodes` with the batch allowances of the pod's stored node conditions."""
    conditions = {row["name"]: _json(row["conditions"]) for row in await conn.fetch(NODE_CONDITIONS_SQL, pod)}
    return await with_batch_allowances(conn, pod, nodes, conditions, config)


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


async def with_batch_allowances(
    conn: Connection, pod: str, nodes: Sequence[NodeResources], conditions: dict[str, Any], config: PlanningConfig
) -> list[NodeResources]:
    """`nodes` with `batch_cpu` / `batch_memory` set from `conditions` (node name → stored condition object)."""
    allowances = {
        name: allowance_from_condition(condition, config.share_base) for name, condition in conditions.items()
    }
    if not any(cpu is not None or memory is not None for cpu, memory in allowances.values()):
        return list(nodes)
    placed: dict[str, tuple[int, int]] = {}
    for row in await conn.fetch(PLACED_SINCE_CONDITION_SQL, pod):
        try:
            need = normalize_request(ResourceRequest.model_validate(_json(row["resources"])), config, "resources")
        except (InvalidInput, ValueError):
            continue  # a record from an older model: it cannot be counted
        cpu, memory = placed.get(row["node"], (0, 0))
        placed[row["node"]] = (cpu + need.cpu_request, memory + need.memory_request)
    result = []
    for node in nodes:
        cpu_left, memory_left = less_placed(allowances.get(node.name, (None, None)), *placed.get(node.name, (0, 0)))
        if cpu_left is None and memory_left is None:
            result.append(node)
        else:
            result.append(replace(node, batch_cpu=cpu_left, batch_memory=memory_left))
    return result
