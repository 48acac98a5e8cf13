"""The ledger against a node's inventory: pure, no I/O, no clock (docs/operations.md "Reconciling the ledger").

Input: the node's latest `NodeInventory` (what its engine runs, taken at `taken_at`), the ledger's rows of that node
and the node's cores. Output: findings, each with the action the policy gives it.

The race rule. A ledger container is `lost` only when all of these hold:
  1. the agent has acknowledged it: its state is running, paused, updating, stopping or stopped (planned and
     creating rows are the overdue sweep's, whose timeout covers commands still in flight);
  2. the ledger knew it in that state before the inventory was taken: `updated_at < taken_at - grace`. A container
     reaches running only through the agent's `started`, sent after the engine created it, so it existed on the
     engine before `taken_at` and the listing must show it; `grace` covers clock skew between the agent and
     PostgreSQL;
  3. the listing does not show it, and no command worked on it between the listing and publishing (`busy`);
  4. no replacement of it is pending (a replace removes the old container before its result reaches the ledger).
A container a recent command removed (`removed`), or one the ledger was stopping anyway, is marked `removed`
instead: its result event is on its way, and it is released exactly once either way.

Worked example (grace 2 s). The allocator plans c1 at 10.0 (planned); the create command waits in the stream; the
agent takes an inventory at 10.5 (no c1), creates c1 at 11.0 and reports `started`; the ledger says running at 11.1
and the 10.5 inventory is reconciled at 11.2: c1 is not listed, but `updated_at` 11.1 is not before 10.5 − 2 = 8.5,
so it is left alone. The next inventory, at 40.5, lists it. Had somebody removed c1 from the engine at 20.0, the
40.5 inventory would not list it, 11.1 < 38.5, and it is lost: released, and a `lost` event published.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import ValidationError

from eru.domain.inventory import InventoryEntry, NodeInventory
from eru.domain.resources import Allocation
from eru.errors import InvalidInput
from eru.nodeagent.engine import engine_resources, format_cpuset, parse_cpuset

ACKNOWLEDGED = frozenset({"running", "paused", "updating", "stopping", "stopped"})
LIVE = frozenset({"planned", "creating", "running", "updating", "paused", "stopping", "stopped"})
GONE = frozenset({"removed", "failed", "lost"})
NOT_RUNNING = frozenset({"exited", "dead", "created"})

Kind = Literal["lost", "gone", "unknown", "foreign", "drift", "exited"]
Action = Literal["mark_lost", "mark_removed", "remove", "reapply", "report"]


@dataclass(frozen=True)
class LedgerRow:
    """One container of the node in the ledger; `updated_at` in seconds since the epoch (the store's clock)."""

    container_id: str
    state: str
    updated_at: float
    allocation: Mapping[str, Any] = field(default_factory=dict)
    priority_class: str = "prod"
    pending_replacement: bool = False


@dataclass(frozen=True)
class ReconcilePolicy:
    """What to do with what is found: `unknown` eru containers of this node the ledger does not hold (`remove` or
    `report`), applied resources that differ (`reapply` the ledger's or `report`), and the clock-skew grace."""

    grace_seconds: float = 10.0
    unknown: Literal["remove", "report"] = "remove"
    drift: Literal["reapply", "report"] = "reapply"


@dataclass(frozen=True)
class Finding:
    """One difference between the ledger and the node, with what will be (or would be) done about it."""

    node: str
    kind: Kind
    container_id: str
    ledger_state: str
    node_state: str
    detail: str
    action: Action

    def as_row(self) -> dict[str, str]:
        """Plain JSON values (the reconcile reply, `--json`)."""
        return {
            "node": self.node,
            "kind": self.kind,
            "container_id": self.container_id,
            "ledger_state": self.ledger_state,
            "node_state": self.node_state,
            "detail": self.detail,
            "action": self.action,
        }


@dataclass(frozen=True)
class Applied:
    """The resource settings that matter, normalised: cpuset as a set of cores, quota 0 = none, memory 0 = none."""

    cpuset: frozenset[str]
    cpu_shares: int
    cpu_quota: int
    memory: int


def observed(entry: InventoryEntry) -> Applied:
    """What the engine applies to a listed container."""
    try:
        cores = frozenset(parse_cpuset(entry.cpuset))
    except InvalidInput:
        cores = frozenset({entry.cpuset})
    return Applied(cores, entry.cpu_shares, max(entry.cpu_quota, 0), entry.memory)


def expected(allocation: Mapping[str, Any], node_cores: Sequence[str]) -> Applied:
    """What the engine should apply for a ledger allocation (`InvalidInput` when the allocation makes no sense)."""
    try:
        parsed = Allocation.model_validate(dict(allocation))
    except ValidationError as error:
        raise InvalidInput("allocation", f"the ledger's allocation does not read: {error.errors()[0]['msg']}") from None
    wanted = engine_resources(parsed, node_cores)
    return Applied(
        frozenset(parse_cpuset(wanted.cpuset_cpus)), wanted.cpu_shares, max(wanted.cpu_quota, 0), wanted.memory
    )


def differences(want: Applied, have: Applied, *, cpu: bool = True) -> list[str]:
    """Readable differences (`cpuset 0,1 ≠ 0-3`); CPU settings only when `cpu` (batch CPU is the eviction service's)."""
    found = []
    if cpu and want.cpuset != have.cpuset:
        found.append(f"cpuset {format_cpuset(have.cpuset) or '-'} (ledger {format_cpuset(want.cpuset) or '-'})")
    if cpu and want.cpu_shares != have.cpu_shares:
        found.append(f"cpu shares {have.cpu_shares} (ledger {want.cpu_shares})")
    if cpu and want.cpu_quota != have.cpu_quota:
        found.append(f"cpu quota {have.cpu_quota} (ledger {want.cpu_quota})")
    if want.memory != have.memory:
        found.append(f"memory {have.memory} (ledger {want.memory})")
    return found


def reconcile(
    inventory: NodeInventory, ledger: Sequence[LedgerRow], node_cores: Sequence[str], policy: ReconcilePolicy
) -> list[Finding]:
    """The differences between the ledger's rows of `inventory.node` and the inventory, sorted by container id."""
    node = inventory.node
    listed = {e.container_id: e for e in inventory.containers if e.managed and e.node == node}
    busy = set(inventory.busy)
    rows = {row.container_id: row for row in ledger}
    settled_before = inventory.taken_at - policy.grace_seconds
    findings: list[Finding] = []
    for row in rows.values():
        if row.state not in ACKNOWLEDGED or row.container_id in listed or row.container_id in busy:
            continue
        if row.pending_replacement or row.updated_at >= settled_before:
            continue
        reason = inventory.removed.get(row.container_id)
        if reason is not None or row.state == "stopping":
            detail = f"removed by the agent ({reason})" if reason is not None else "not on the node while stopping"
            findings.append(Finding(node, "gone", row.container_id, row.state, "", detail, "mark_removed"))
        else:
            detail = f"the ledger says {row.state}, the node does not run it"
            findings.append(Finding(node, "lost", row.container_id, row.state, "", detail, "mark_lost"))
    for entry in listed.values():
        if entry.container_id in busy:
            continue
        held = rows.get(entry.container_id)
        if held is None or (held.state in GONE and held.updated_at < settled_before):
            known = "not in the ledger" if held is None else f"the ledger says {held.state}"
            action: Action = "remove" if policy.unknown == "remove" else "report"
            findings.append(
                Finding(node, "unknown", entry.container_id, held.state if held else "", entry.state, known, action)
            )
            continue
        row = held
        if row.state not in ("running", "paused") or row.updated_at >= settled_before:
            continue
        if entry.state in NOT_RUNNING and row.state == "running":
            findings.append(
                Finding(node, "exited", entry.container_id, row.state, entry.state, "not running on the node", "report")
            )
            continue
        findings += _drift(node, row, entry, node_cores, policy)
    for entry in inventory.containers:
        if not (entry.managed and entry.node == node):
            owner = f"an eru container of node {entry.node!r}" if entry.managed else "not made by eru"
            findings.append(Finding(node, "foreign", entry.container_id, "", entry.state, owner, "report"))
    return sorted(findings, key=lambda f: (f.container_id, f.kind))


def _drift(
    node: str, row: LedgerRow, entry: InventoryEntry, node_cores: Sequence[str], policy: ReconcilePolicy
) -> list[Finding]:
    try:
        want = expected(row.allocation, node_cores)
    except InvalidInput as error:
        return [Finding(node, "drift", row.container_id, row.state, entry.state, error.message, "report")]
    # Batch CPU is squeezed and released by the eviction service (docs/colocation.md), not recorded in the ledger.
    cpu = row.priority_class != "batch" and not entry.suppressed
    found = differences(want, observed(entry), cpu=cpu)
    if not found:
        return []
    action: Action = "reapply" if policy.drift == "reapply" else "report"
    if want.memory == 0 and observed(entry).memory > 0:
        action = "report"  # an engine cannot lift a hard memory limit in place (docs/node-agent.md)
    return [Finding(node, "drift", row.container_id, row.state, entry.state, "; ".join(found), action)]
