"""The pure reconcile rule (eru.reconcile): what is lost, gone, unknown, foreign or drifted — and what is left alone."""

from __future__ import annotations

from typing import Any

from eru.domain.inventory import InventoryEntry, NodeInventory
from eru.reconcile import LedgerRow, ReconcilePolicy, reconcile

CORES = ["0", "1", "2", "3"]
POLICY = ReconcilePolicy(grace_seconds=2.0)
BOUND = {"cpu_map": {"1": 100, "2": 50}, "memory": 512 * 2**20, "cpu_bind": True}  # cpuset 1,2, shares 512


def entry(cid: str, **fields: Any) -> InventoryEntry:
    values: dict[str, Any] = {
        "container_id": cid,
        "managed": True,
        "node": "n1",
        "state": "running",
        "cpuset": "1-2",
        "cpu_shares": 512,
        "cpu_quota": 0,
        "memory": 512 * 2**20,
    }
    values.update(fields)
    return InventoryEntry.model_validate(values)


def inventory(*entries: InventoryEntry, taken_at: float = 40.5, **fields: Any) -> NodeInventory:
    return NodeInventory(node="n1", agent="run-1", taken_at=taken_at, containers=list(entries), **fields)


def row(cid: str, state: str = "running", updated_at: float = 11.1, **fields: Any) -> LedgerRow:
    return LedgerRow(container_id=cid, state=state, updated_at=updated_at, allocation=BOUND, **fields)


def kinds(findings: list[Any]) -> list[tuple[str, str, str]]:
    return [(f.kind, f.container_id, f.action) for f in findings]


def test_the_worked_example_a_container_created_after_the_listing_is_left_alone() -> None:
    # docs: planned at 10.0, inventory at 10.5 (no c1), running in the ledger at 11.1, reconciled at 11.2
    assert reconcile(inventory(taken_at=10.5), [row("c1", updated_at=11.1)], CORES, POLICY) == []
    # removed behind eru's back at 20.0: the 40.5 inventory does not list it and the ledger knew it since 11.1
    found = reconcile(inventory(taken_at=40.5), [row("c1", updated_at=11.1)], CORES, POLICY)
    assert kinds(found) == [("lost", "c1", "mark_lost")]
    assert "does not run it" in found[0].detail


def test_the_grace_covers_clock_skew() -> None:
    # the ledger's clock says 39.0, the agent's says 40.5: within 2 s of grace the row is not judged yet
    assert reconcile(inventory(taken_at=40.5), [row("c1", updated_at=39.0)], CORES, POLICY) == []
    assert kinds(reconcile(inventory(taken_at=40.5), [row("c1", updated_at=38.4)], CORES, POLICY)) == [
        ("lost", "c1", "mark_lost")
    ]


def test_pending_busy_and_replaced_containers_are_never_lost() -> None:
    ledger = [
        row("planned", state="planned", updated_at=0.0),
        row("creating", state="creating", updated_at=0.0),
        row("busy", updated_at=0.0),
        row("old", state="paused", updated_at=0.0, pending_replacement=True),
    ]
    assert reconcile(inventory(busy=["busy"]), ledger, CORES, POLICY) == []


def test_a_container_a_command_removed_or_the_ledger_was_stopping_is_marked_removed() -> None:
    ledger = [row("evicted", updated_at=0.0), row("stopping", state="stopping", updated_at=0.0)]
    found = reconcile(inventory(removed={"evicted": "memory evict watermark"}), ledger, CORES, POLICY)
    assert kinds(found) == [("gone", "evicted", "mark_removed"), ("gone", "stopping", "mark_removed")]
    assert "memory evict watermark" in found[0].detail


def test_unknown_containers_are_removed_or_reported_by_policy_and_foreign_ones_only_reported() -> None:
    listed = inventory(
        entry("stray"),
        entry("gone-row"),
        entry("other", node="n2"),
        InventoryEntry(container_id="postgres-1", managed=False, state="running"),
    )
    ledger = [row("gone-row", state="removed", updated_at=0.0)]
    found = reconcile(listed, ledger, CORES, POLICY)
    assert kinds(found) == [
        ("unknown", "gone-row", "remove"),
        ("foreign", "other", "report"),
        ("foreign", "postgres-1", "report"),
        ("unknown", "stray", "remove"),
    ]
    reported = reconcile(listed, ledger, CORES, ReconcilePolicy(grace_seconds=2.0, unknown="report"))
    assert [f.action for f in reported if f.kind == "unknown"] == ["report", "report"]
    # a row that became removed a moment ago is not judged yet (its container may still be on its way out)
    assert reconcile(inventory(entry("fresh")), [row("fresh", state="failed", updated_at=40.0)], CORES, POLICY) == []


def test_applied_resources_that_differ_are_reapplied_except_what_an_engine_cannot_or_must_not_change() -> None:
    ledger = [row("c1", updated_at=0.0)]
    assert reconcile(inventory(entry("c1")), ledger, CORES, POLICY) == []
    found = reconcile(inventory(entry("c1", cpuset="0-3", cpu_shares=1024)), ledger, CORES, POLICY)
    assert kinds(found) == [("drift", "c1", "reapply")]
    assert found[0].detail == "cpuset 0-3 (ledger 1-2); cpu shares 1024 (ledger 512)"
    reported = reconcile(
        inventory(entry("c1", memory=1)), ledger, CORES, ReconcilePolicy(grace_seconds=2.0, drift="report")
    )
    assert kinds(reported) == [("drift", "c1", "report")]
    # batch CPU is the eviction service's to squeeze: only memory is compared
    batch = [row("b1", updated_at=0.0, priority_class="batch")]
    assert reconcile(inventory(entry("b1", cpuset="0-3", cpu_quota=50000)), batch, CORES, POLICY) == []
    # a soft allocation cannot lift a hard limit in place: reported, never reapplied in a loop
    soft = [LedgerRow("s1", "running", 0.0, {**BOUND, "memory_soft": True})]
    assert kinds(reconcile(inventory(entry("s1")), soft, CORES, POLICY)) == [("drift", "s1", "report")]


def test_an_exited_container_is_reported_and_an_unreadable_allocation_named() -> None:
    found = reconcile(inventory(entry("c1", state="exited")), [row("c1", updated_at=0.0)], CORES, POLICY)
    assert kinds(found) == [("exited", "c1", "report")]
    broken = [LedgerRow("c2", "running", 0.0, {"cpu_map": {"9": 100}, "cpu_bind": True})]
    found = reconcile(inventory(entry("c2")), broken, CORES, POLICY)
    assert kinds(found) == [("drift", "c2", "report")]
    assert "allocation.cpu_map" in found[0].detail or "not cores of this node" in found[0].detail


def test_a_restarted_sim_agent_with_an_empty_engine_loses_everything_it_had() -> None:
    ledger = [row(f"c{i}", updated_at=float(i)) for i in range(30)] + [row("new", state="planned", updated_at=0.0)]
    found = reconcile(inventory(taken_at=100.0), ledger, CORES, POLICY)
    assert len(found) == 30
    assert {f.action for f in found} == {"mark_lost"}
