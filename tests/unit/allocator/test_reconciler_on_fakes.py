"""The reconciler applying its findings (docs/operations.md "Reconciling the ledger") on the in-memory store: a
container the node no longer runs marked lost through the container events capability, a stray container's remove
command queued through the nodes capability, each once however often the same inventory is reconciled; inventories
kept (the newest per node) and reconciled against the ledger the nodes capability reads, and `eru reconcile` over the
kept ones. The context holds the store's capabilities only (no pool): the reconciler speaks only the protocols."""

from __future__ import annotations

import json

from eru.bus.subjects import node_command
from eru.domain.inventory import InventoryEntry, NodeInventory, ReconcileRequest
from eru.planning import NodeResources
from eru.reconcile import LedgerRow, ReconcilePolicy
from eru.store.protocol import ContainerRow, DeployRow
from eru.testing.memory_store import InMemoryStore
from eru_allocator.containers.events import EventContext
from eru_allocator.nodes.reconciler import _reconciled, on_inventories, reconcile_request

POD = "p1"
ALLOCATION = {"cpu_map": {"0": 50}, "memory": 64 << 20}


def _entry(cid: str) -> InventoryEntry:
    values = {"container_id": cid, "managed": True, "node": "n1", "state": "running", "cpuset": "0", "memory": 1}
    return InventoryEntry.model_validate(values)


async def test_findings_applied_through_the_protocols_once() -> None:
    store = InMemoryStore()
    store.add_pod(POD)
    store.add_node(POD, NodeResources("n1", {"0": 100}, 4 << 30))
    store.deploys["d1"] = DeployRow("d1", "k1", POD, "acme", "running", "{}", "{}")
    store.containers["c1"] = ContainerRow(
        "c1", "d1", "n1", POD, "web", "busybox", "acme", "prod", 0, json.dumps(ALLOCATION), "{}", "running", "{}", None
    )
    ctx = EventContext("test", store, store)
    inventory = NodeInventory(node="n1", agent="run-1", taken_at=40.5, containers=[_entry("stray")])
    ledger = [LedgerRow(container_id="c1", state="running", updated_at=11.1, allocation=ALLOCATION)]
    policy = ReconcilePolicy(grace_seconds=2.0)
    for _ in range(2):  # the same inventory again: nothing more happens
        findings = await _reconciled(ctx, inventory, ["0"], ledger, policy, dry_run=False)
        assert [(f.kind, f.container_id, f.action) for f in findings] == [
            ("lost", "c1", "mark_lost"),
            ("unknown", "stray", "remove"),
        ]
    assert store.containers["c1"].state == "lost"
    commands = [m for m in store.outbox if m.subject == node_command("n1", "remove")]
    assert [(m.message.model_dump()["container_id"], m.envelope.id.startswith("reconcile-")) for m in commands] == [
        ("stray", True)
    ]


async def test_inventories_are_kept_and_reconciled_against_the_ledger_the_nodes_capability_reads() -> None:
    store = InMemoryStore()
    store.add_pod(POD)
    store.add_node(POD, NodeResources("n1", {"0": 100}, 4 << 30))
    store.deploys["d1"] = DeployRow("d1", "k1", POD, "acme", "running", "{}", "{}")
    store.containers["c1"] = ContainerRow(
        "c1", "d1", "n1", POD, "web", "busybox", "acme", "prod", 0, json.dumps(ALLOCATION), "{}", "running", "{}", None
    )
    store.now = 10.0
    ctx = EventContext("test", store, store)
    policy = ReconcilePolicy(grace_seconds=2.0)
    late = NodeInventory(node="n1", agent="run-1", taken_at=40.5, containers=[_entry("stray")])
    early = NodeInventory(node="n1", agent="run-1", taken_at=30.0, containers=[])
    unknown = NodeInventory(node="n9", agent="run-1", taken_at=40.5, containers=[])
    found = await on_inventories(ctx, [early, late, unknown], policy, enabled=True)
    assert [(f.kind, f.container_id) for f in found["n1"]] == [("lost", "c1"), ("unknown", "stray")]
    assert sorted(found) == ["n1"]  # n9 is not registered: nothing of the ledger can be on it
    assert store.containers["c1"].state == "lost"
    assert await on_inventories(ctx, [early], policy, enabled=True) == {}  # older than the kept one
    dry = await reconcile_request(ctx, ReconcileRequest(node="n1", dry_run=True), policy, 60.0)
    assert dry.message == "1 nodes compared, 1 differences, 1 would be acted on"
    none = await reconcile_request(ctx, ReconcileRequest(node="n2", dry_run=True), policy, 60.0)
    assert none.warnings == ["node n2: no inventory yet (its agent publishes one at start)"]
