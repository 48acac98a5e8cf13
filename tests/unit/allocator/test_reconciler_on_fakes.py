"""The reconciler applying its findings (docs/operations.md "Reconciling the ledger") on the in-memory store: a
container the node no longer runs marked lost through the container events capability, a stray container's remove
command queued through the nodes capability, each once however often the same inventory is reconciled. The context's
pool refuses every call: applying findings speaks only the protocols."""

from __future__ import annotations

import json
from typing import NoReturn

from eru.bus.subjects import node_command
from eru.domain.inventory import InventoryEntry, NodeInventory
from eru.planning import NodeResources
from eru.reconcile import LedgerRow, ReconcilePolicy
from eru.store.protocol import ContainerRow, DeployRow
from eru.testing.memory_store import InMemoryStore
from eru_allocator.containers.events import EventContext
from eru_allocator.nodes.reconciler import _reconciled

POD = "p1"
ALLOCATION = {"cpu_map": {"0": 50}, "memory": 64 << 20}


class RefusingPool:
    """A pool that fails any use: the handler under test must go through the store's protocols."""

    def __getattr__(self, name: str) -> NoReturn:
        raise AssertionError(f"the handler reached for the pool ({name}) past the store")


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
    ctx = EventContext(RefusingPool(), "test", events=store, nodes=store)  # type: ignore[arg-type]
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
