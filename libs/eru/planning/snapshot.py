"""`ClusterSnapshot` and `DeployAsk`: the immutable inputs of the deploy decision (docs/pipeline.md "The decision").

A snapshot is everything a deploy decision reads about one pod, taken once (by a store, by `eru plan` from a JSON
problem, by `eru sim` from its model) and never changed: the schedulable nodes with their usage and batch allowances,
the pod's other nodes with their state (cordoned, down), the live instances per workload and node, the nodes whose
condition forbids new batch instances (with the watermarks' numbers), the tenants'
reservations and what they hold per node, the pod's recent evictions, and for mode `score` the QoS mix and the pod's
scorer weights. `charged(ask, plan)` returns the snapshot the next request of a batch sees; the old one is untouched,
so a plan can always be re-run against the input it was made from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from eru.colocation.backoff import Eviction, KeepConfig
from eru.fairness.drf import Tenant, TenantUsage
from eru.fairness.ledger import parent_of
from eru.planning.batch import charge_batch_placements
from eru.planning.left_out import NodeState, Watermark
from eru.planning.node_filter import NodeFilter
from eru.planning.request import NormalizedRequest, PlanningConfig
from eru.planning.reservations import Amount
from eru.planning.resources import ContainerPlan, NodeResources, charge, node_positions
from eru.planning.scorers.qos import qos_class

EMPTY: Mapping[Any, Any] = MappingProxyType({})


def _empty() -> Mapping[Any, Any]:
    return EMPTY


@dataclass(frozen=True, slots=True)
class EvictionHistory:
    """A pod's recent evictions at `now` and the back-off settings (docs/colocation.md "Memory of evictions")."""

    now: float
    history: tuple[Eviction, ...] = ()
    keep: KeepConfig = field(default_factory=KeepConfig)


@dataclass(frozen=True, slots=True)
class DeployAsk:
    """One deploy request as the decision sees it: the normalised requirement (its `batch` flag included), the mode
    and its numbers, the workload and tenant it counts for, and the wire form of its resources (for the record)."""

    request: NormalizedRequest
    mode: str
    count: int
    nodes_limit: int = 0
    options: Mapping[str, Any] = field(default_factory=_empty)
    workload: str = ""
    tenant: str = ""
    resources: Mapping[str, Any] = field(default_factory=_empty)
    """The request's `workload.resources` as JSON: what the decision record (an `eru plan` problem) holds."""
    avoid_evictions: bool = False
    """Whether the pod's eviction memory applies (the allocator: batch requests; an `eru plan` problem: when it
    carries a history)."""
    node_filter: NodeFilter | None = None
    """The nodes of the pod the request may use at all (`eru.planning.node_filter`); None: every node."""


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """One pod's state as a deploy decision reads it. Every mapping is read-only by contract: `charged` builds new
    ones."""

    config: PlanningConfig
    nodes: tuple[NodeResources, ...]
    """Schedulable nodes (up, not cordoned, heard from), sorted by name, with their batch allowances."""
    counts: Mapping[str, Mapping[str, int]] = field(default_factory=_empty)
    """workload → node → live instances."""
    forbid_batch: frozenset[str] = frozenset()
    """Nodes whose newest condition forbids new batch instances."""
    watermarks: Mapping[str, tuple[Watermark, ...]] = field(default_factory=_empty)
    """node of `forbid_batch` → the watermarks its condition reports (usage and forbid percent), for the reason."""
    unschedulable: Mapping[str, NodeState] = field(default_factory=_empty)
    """The pod's other nodes (cordoned, down, silent), each with its state: never placed on, named in the decision
    (`eru.planning.left_out`)."""
    reservations: Mapping[str, Mapping[str, Amount]] = field(default_factory=_empty)
    """node → top-level tenant → reserved amount."""
    held: Mapping[tuple[str, str], Amount] = field(default_factory=_empty)
    """(top-level tenant, node) → what its live containers hold there (only read when there are reservations)."""
    evictions: EvictionHistory | None = None
    """The pod's recent evictions (read for batch requests only)."""
    qos: Mapping[str, Mapping[str, int]] | None = None
    """node → QoS class → live instances (mode `score` only)."""
    pod_weights: Mapping[str, float] | None = None
    """The pod's scorer weights (`pods.policy.scorers`, mode `score`)."""
    tenants: Mapping[str, Tenant] | None = None
    """Tenants by name (admission); None when not loaded."""
    tenant_usage: Mapping[str, TenantUsage] | None = None
    """What each tenant and group holds in the pod (cores requested, bound or not; memory; instances), the requests
    planned earlier in the batch included; None when no tenant has a limit or quota and the pod has no reservation
    (nothing reads it then)."""
    pod: str = ""
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=_empty)
    """node → its effective labels (the agent's overlaid by the operator's), every node of the pod, schedulable or
    not; read only when a request of the batch has a node filter (empty otherwise)."""
    counted: frozenset[str] | None = None
    """The workloads whose live counts `counts` holds (a deploy batch reads its own only); None: every workload."""

    def node_labels(self) -> dict[str, Mapping[str, str]]:
        """Every node of the pod (schedulable, left out, in `labels`) → its labels (none when not read)."""
        names = {node.name for node in self.nodes} | self.unschedulable.keys() | self.forbid_batch | self.labels.keys()
        return {name: self.labels.get(name, EMPTY) for name in sorted(names)}

    def workload_counts(self, workload: str) -> Mapping[str, int]:
        """node → live instances of `workload`."""
        return self.counts.get(workload, EMPTY)

    def for_workloads(self, workloads: Iterable[str]) -> ClusterSnapshot:
        """The snapshot with live counts of `workloads` only (workloads without live instances left out, as the
        stores read them; a workload this snapshot did not count counts as nothing live): what decisions of those
        workloads read, so two snapshots that agree on it give the same decisions for them (docs/pipeline.md step
        3)."""
        wanted = frozenset(workloads)
        counts = {name: self.counts[name] for name in sorted(wanted) if self.counts.get(name)}
        return replace(self, counts=counts, counted=wanted)

    def uncounted(self, workloads: Iterable[str]) -> frozenset[str]:
        """Those of `workloads` whose live counts this snapshot does not hold."""
        return frozenset() if self.counted is None else frozenset(workloads) - self.counted

    def stands_for(self, newer: ClusterSnapshot) -> bool:
        """Whether a decision made against this snapshot stands for `newer`, the pod read again later (the deploy
        batch's read under the pod's lock, docs/pipeline.md "The pod lock and the distributor"): every input the
        same, except the instant the eviction memory was read at (PostgreSQL's `now`, new at every read). With the
        same evictions, an earlier instant avoids every node a later one does (a back-off only runs out; an eviction
        is dropped only as the decay passes it, and then the histories differ), so the decision is the one made a
        moment earlier: it holds, and records the instant it was made at."""
        if self == newer:
            return True
        mine, theirs = self.evictions, newer.evictions
        if mine is None or theirs is None or mine.now > theirs.now:
            return False
        return replace(self, evictions=replace(mine, now=theirs.now)) == newer

    def with_counts(self, counts: Mapping[str, Mapping[str, int]]) -> ClusterSnapshot:
        """The snapshot with the live counts of more workloads (`counts`: workload → node → live, as read), now
        counted."""
        merged = {**self.counts, **{name: per_node for name, per_node in counts.items() if per_node}}
        counted = None if self.counted is None else self.counted | frozenset(counts)
        return replace(self, counts=merged, counted=counted)

    def charged(
        self, ask: DeployAsk, containers: tuple[ContainerPlan, ...], placements: Mapping[str, int]
    ) -> ClusterSnapshot:
        """The snapshot after `ask`'s plan: nodes charged with its containers (and batch allowances with its
        placements), live counts, the QoS mix and the tenant's holdings increased. `self` is unchanged."""
        if not containers:
            return self
        by_node: dict[str, list[ContainerPlan]] = {}
        for plan in containers:
            by_node.setdefault(plan.node, []).append(plan)
        positions = node_positions(self.nodes, by_node)  # the charged nodes only, not a pass over the pod
        if positions is None:
            nodes = [charge(node, by_node[node.name]) if node.name in by_node else node for node in self.nodes]
        else:
            nodes = list(self.nodes)
            for at in positions:
                nodes[at] = charge(nodes[at], by_node[nodes[at].name])
        if ask.request.batch:
            nodes = charge_batch_placements(nodes, ask.request, placements)
        per_workload = dict(self.counts.get(ask.workload, EMPTY))
        for name, plans in by_node.items():
            per_workload[name] = per_workload.get(name, 0) + len(plans)
        changes: dict[str, Any] = {"nodes": tuple(nodes), "counts": {**self.counts, ask.workload: per_workload}}
        if self.qos is not None:
            changes["qos"] = qos_mix(((plan.node, ask.request) for plan in containers), self.qos)
        if self.reservations:
            changes["held"] = charged_holdings(self.held, ask, by_node)
        if self.tenant_usage is not None:
            usage = dict(self.tenant_usage)
            demand = instance_demand(ask.request, self.config.share_base)
            count = len(containers)
            held = usage.get(ask.tenant, TenantUsage())
            usage[ask.tenant] = held.plus({name: amount * count for name, amount in demand.items()}, count)
            changes["tenant_usage"] = usage
        return replace(self, **changes)


def instance_demand(request: NormalizedRequest, share_base: int) -> dict[str, Fraction]:
    """What one instance is charged to its tenant (its limit, quota and DRF share): the cores it *requests*, bound
    or not, and memory bytes. A memory-prime instance's CPU is a CFS quota a node may oversell (docs/planning.md),
    but a tenant's limit and quota are promises about what it requests (docs/fairness-and-scoring.md)."""
    return {"cpu": Fraction(request.cpu_request, share_base), "memory": Fraction(request.memory_request)}


def instance_reserves(request: NormalizedRequest, share_base: int) -> dict[str, Fraction]:
    """What one instance takes from its node's free resources: cores only when bound (unbound CPU is not reserved:
    it may be oversold) and memory bytes (never oversold)."""
    return {
        "cpu": Fraction(request.cpu_request if request.cpu_bind else 0, share_base),
        "memory": Fraction(request.memory_request),
    }


def qos_mix(
    instances: Iterable[tuple[str, NormalizedRequest]], base: Mapping[str, Mapping[str, int]] | None = None
) -> dict[str, dict[str, int]]:
    """node → Kubernetes QoS class (from requests and limits) → live instances: `base` plus one per (node,
    requirement). The one place eru counts QoS classes: the stores' snapshots and `charged` both use it."""
    mix = {node: dict(classes) for node, classes in (base or {}).items()}
    for node, request in instances:
        cls = qos_class(request.cpu_request, request.cpu_limit, request.memory_request, request.memory_limit)
        per_node = mix.setdefault(node, {})
        per_node[cls] = per_node.get(cls, 0) + 1
    return mix


def charged_holdings(
    held: Mapping[tuple[str, str], Amount], ask: DeployAsk, by_node: Mapping[str, list[ContainerPlan]]
) -> dict[tuple[str, str], Amount]:
    """`held` plus the new instances of `ask` (bound CPU pieces and memory per instance, as reservations count)."""
    request = ask.request
    tenant = parent_of(ask.tenant)
    one = Amount(request.cpu_request if request.cpu_bind else 0, request.memory_request)
    result = dict(held)
    for name, plans in by_node.items():
        amount = Amount(one.cpu * len(plans), one.memory * len(plans))
        result[(tenant, name)] = result.get((tenant, name), Amount()).plus(amount)
    return result


def snapshot_of(
    nodes: tuple[NodeResources, ...] | list[NodeResources], config: PlanningConfig, **fields: Any
) -> ClusterSnapshot:
    """A snapshot of `nodes` (in the given order) with the other fields as keywords."""
    return ClusterSnapshot(config=config, nodes=tuple(nodes), **fields)
