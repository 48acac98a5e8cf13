"""The nodes capability (`eru.store.nodes.NodeStore`) on PostgreSQL: `nodes` rows upserted under the pod locks,
heartbeats and conditions in `node_status` (never the `nodes` row a deploy holds, docs/store.md "Node status"),
cordon flags and operator labels (statements in `store.node_registry`), node agents' inventories and the ledger the
reconciler compares them with (statements in `store.inventories`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence

import asyncpg

from eru.domain.colocation import NodeCondition
from eru.domain.inventory import NodeInventory
from eru.reconcile import LedgerRow
from eru.store import lock_pod, transaction
from eru.store.nodes import ConditionChange, KeptInventory, NodeCapacity, NodeRecord, NodeStore
from eru.store.protocol import OutboxMessage
from eru_allocator.store import inventories as inventory_rows
from eru_allocator.store import node_registry
from eru_allocator.store.outbox import queue_many


class PgNodes:
    """`NodeStore` over `pool` (see the module doc)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def register(self, nodes: Sequence[NodeCapacity]) -> None:
        """One transaction: pods created, their locks in name order, capacities written, heartbeats now."""
        if not nodes:
            return
        async with transaction(self.pool) as conn:
            # a node keeps the pod it is in (an operator may have moved it); only a new node joins the agent's pod
            current = await node_registry.current_pods(conn, [node.name for node in nodes])
            for pod in sorted({node.pod for node in nodes}):
                await node_registry.ensure_pod(conn, pod)
            for pod in sorted({current.get(node.name) or node.pod for node in nodes}):
                await lock_pod(conn, pod)
            await node_registry.upsert_capacities(conn, nodes, keep_pod=True)
            await node_registry.registered(conn, [node.name for node in nodes])

    async def heartbeats(self, names: Sequence[str]) -> set[str]:
        """One statement, rows in name order; the known names."""
        ordered = sorted(set(names))
        return await node_registry.heartbeats(self.pool, ordered) if ordered else set()

    async def write_conditions(self, conditions: Sequence[NodeCondition]) -> list[ConditionChange]:
        """One statement: the newest condition of each known node."""
        if not conditions:
            return []
        return await node_registry.write_conditions(
            self.pool,
            [c.node for c in conditions],
            [c.model_dump_json() for c in conditions],
            [c.time for c in conditions],
        )

    async def wake_admission(self, pod: str) -> None:
        """pg_notify('eru_admission', pod) when requests wait in `pod`."""
        await node_registry.wake_admission_if_waiting(self.pool, pod)

    async def set_cordoned(self, name: str, cordoned: bool) -> bool:
        """Cordon or uncordon node `name`; False when unknown."""
        return await node_registry.set_cordoned(self.pool, name, cordoned)

    async def change_node(
        self,
        name: str,
        change: Callable[[NodeRecord | None], NodeRecord],
        check_move: Callable[[str, int], None],
    ) -> NodeRecord | None:
        """One transaction: read, `change`, lock the pods (`check_move` when it moves), write."""
        async with transaction(self.pool) as conn:
            current = await node_registry.node_to_change(conn, name)
            new = change(current)
            pod = new.capacity.pod
            await node_registry.ensure_pod(conn, pod)
            await lock_pod(conn, pod)
            if current is not None and pod != current.capacity.pod:
                await lock_pod(conn, current.capacity.pod)
                check_move(current.capacity.pod, await node_registry.live_on_node(conn, name))
            await node_registry.upsert_capacities(conn, [new.capacity], keep_pod=False)
            before = dict(current.operator_labels) if current is not None else {}
            if dict(new.operator_labels) != before:
                await node_registry.set_operator_labels(conn, name, json.dumps(dict(new.operator_labels)))
        return current

    async def create_pod(self, name: str) -> bool:
        """One statement (`INSERT … ON CONFLICT DO NOTHING`)."""
        return await node_registry.ensure_pod(self.pool, name)

    async def queue_commands(self, commands: Sequence[OutboxMessage]) -> None:
        """One statement in its own transaction (`store.outbox.queue_many`)."""
        if not commands:
            return
        async with transaction(self.pool) as conn:
            await queue_many(conn, [(command.subject, command.message, command.envelope) for command in commands])

    async def keep_inventories(self, inventories: Sequence[NodeInventory]) -> list[str]:
        """One statement (rows in node order: replicas' batches never deadlock)."""
        return await inventory_rows.keep_inventories(self.pool, inventories)

    async def node_cores(self, names: Collection[str]) -> dict[str, list[str]]:
        """One statement."""
        return await inventory_rows.cores_of(self.pool, names)

    async def ledgers(self, listed: Mapping[str, Collection[str]]) -> dict[str, list[LedgerRow]]:
        """One statement for every node of `listed`."""
        return await inventory_rows.ledgers(self.pool, listed)

    async def kept_inventories(self, node: str | None, pod: str | None) -> list[KeptInventory]:
        """One statement."""
        return await inventory_rows.kept_inventories(self.pool, node, pod)


def _conforms(store: PgNodes) -> NodeStore:
    """Where mypy checks that `PgNodes` is a `NodeStore`."""
    return store
