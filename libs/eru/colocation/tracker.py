"""One node's colocation state between samples, and the messages each sample calls for (still pure: `now` is given).

`NodeTracker.observe(metrics, now)` feeds one `NodeMetrics` sample into the node's window and reservations, runs
`decide`, and returns the node commands (CFS quota updates for suppression, evictions), the decision events (with
the whole input as a docs/planning.md `evict` problem) and, when something an operator or the allocator cares about
changed, a `NodeCondition`. The eviction service only routes samples here and publishes what comes back.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

from eru.colocation.config import ColocationConfig
from eru.colocation.outcome import Outcome, check_sample, eviction_victim, refusals
from eru.colocation.peak import PeakWindow, peak_room
from eru.colocation.plan_kind import evict_problem
from eru.colocation.policy import (
    BATCH,
    ContainerInfo,
    Decision,
    NodeSpec,
    NodeState,
    Sample,
    Usage,
    decide,
    window_point,
)
from eru.colocation.progress import add_work, with_work, workload_budgets
from eru.colocation.quota import cpu_cap, spread_quota
from eru.colocation.reservation import Reservation, batch_capacity
from eru.colocation.window import MICRO, SlidingWindow, cores, micro
from eru.domain.colocation import (
    EvictionDecision,
    NodeCondition,
    WatermarkState,
)
from eru.domain.messages import NodeCommand, NodeMetrics
from eru.errors import InvalidInput

MIN_QUOTA_CHANGE = 10_000  # 0.01 core: smaller changes of the allowance are not worth a command
CAPACITY_CHANGE_PERCENT = 5  # republish the condition when batch capacity moves by this share of the node


WATERMARK_FIELDS = ("cpu_forbid", "cpu_suppress", "cpu_evict", "memory_forbid", "memory_evict")


def registered_capacity(metrics: NodeMetrics, node: NodeSpec) -> tuple[int, int]:
    """(micro-cores, bytes) batch may be placed against: the node's measured capacity, bounded by what it registered."""
    cpu, memory = node.cpu, node.memory
    if metrics.registered_cpu is not None:
        cpu = min(cpu, micro(metrics.registered_cpu))
    if metrics.registered_memory is not None:
        memory = min(memory, metrics.registered_memory)
    return cpu, memory


class NodeTracker:
    """The per-node state of the eviction service: window, registry, reservations, flags, pending evictions."""

    def __init__(
        self,
        node: str,
        config: ColocationConfig,
        *,
        replica: str = "",
        condition_refresh_seconds: float = 30.0,
        condition_floor_seconds: float = 300.0,
        eviction_retry_seconds: float = 60.0,
    ) -> None:
        self.node = node
        self.config = config
        self.replica = replica
        self.condition_refresh_seconds = condition_refresh_seconds
        self.condition_floor_seconds = condition_floor_seconds
        self.eviction_retry_seconds = eviction_retry_seconds
        self.window = SlidingWindow(config.window_seconds, config.metrics_interval_seconds)
        self.registry: dict[str, ContainerInfo] = {}  # every container seen within the window, latest facts
        self.last_seen: dict[str, float] = {}
        self._facts: dict[str, tuple[tuple[object, ...], ContainerInfo]] = {}
        self.cpu_reservations: dict[str, Reservation] = {}
        self.memory_reservations: dict[str, Reservation] = {}
        self.pending: dict[str, float] = {}
        self.commanded: int | None = None
        self.quotas: dict[str, int] = {}  # the quota last commanded per batch container while suppressed
        self.suppress_changed: float | None = None  # when the allowance last changed (the suppression dwell)
        self.quota_set: frozenset[str] = frozenset()
        self.last_cpu_eviction: float | None = None
        self.last_memory_eviction: float | None = None
        self.forbid_cpu = self.forbid_memory = False
        self.last_condition: NodeCondition | None = None
        self.condition_batch: frozenset[str] = frozenset()  # the batch containers the last condition's sample listed
        self.work: dict[str, float] = {}  # CPU-seconds each batch container has done (progress-aware victims)
        self.ls_peak = PeakWindow(config.room_horizon_seconds)
        self.last_refused: tuple[frozenset[str], float] | None = None
        self.room = 0  # batch room under the suppress line at the LS peak (micro-cores)

    def _read(self, metrics: NodeMetrics) -> tuple[dict[str, ContainerInfo], dict[str, Usage]]:
        infos: dict[str, ContainerInfo] = {}
        usages: dict[str, Usage] = {}
        facts = self._facts
        for index, c in enumerate(metrics.containers):
            cid = c.container_id
            if not 0 <= c.cpu_used < math.inf or c.memory_used < 0 or not 0 <= c.cpu_request < math.inf:
                raise InvalidInput(f"containers[{index}]", f"container {cid!r} has a negative or NaN figure")
            key = (
                c.priority_class,
                c.priority,
                c.cpu_request,
                c.memory_request,
                c.cpu_limit,
                c.memory_limit,
                c.workload,
                c.evictions,
                c.cpu_cores,
            )
            known = facts.get(cid)
            if known is None or known[0] != key:
                info = ContainerInfo(
                    cid,
                    c.priority_class,
                    c.priority,
                    round(c.cpu_request * MICRO),
                    c.memory_request,
                    round(c.cpu_limit * MICRO),
                    c.memory_limit,
                    workload=c.workload,
                    evictions=c.evictions,
                    cpu_cores=c.cpu_cores,
                )
                facts[cid] = (key, info)
            else:
                info = known[1]
            infos[cid] = info
            usages[cid] = Usage(round(c.cpu_used * MICRO), c.memory_used)
        return infos, usages

    def _reservations(self, metrics: NodeMetrics, usages: dict[str, Usage]) -> tuple[int, int, int, int]:
        """Reserved CPU and memory of prod/mid, requested CPU and memory of batch, on this sample's containers."""
        cpu = memory = seen = batch_cpu = batch_memory = 0
        for cid, usage in usages.items():
            info = self.registry[cid]
            if info.priority_class == BATCH:
                batch_cpu += info.cpu_request
                batch_memory += info.memory_request
                continue
            seen += 1
            cpu_res = self.cpu_reservations.get(cid)
            if cpu_res is None:
                cpu_res = self.cpu_reservations[cid] = Reservation(info.cpu_request, metrics.time)
            mem_res = self.memory_reservations.get(cid)
            if mem_res is None:
                mem_res = self.memory_reservations[cid] = Reservation(info.memory_request, metrics.time)
            cpu += cpu_res.observe(metrics.time, usage.cpu_used, self.config, info.cpu_request)
            memory += mem_res.observe(metrics.time, usage.memory_used, self.config, info.memory_request)
        if len(self.cpu_reservations) > seen:  # a prod/mid container left: forget its reservations
            for table in (self.cpu_reservations, self.memory_reservations):
                for cid in [cid for cid in table if cid not in usages]:
                    del table[cid]
        return cpu, memory, batch_cpu, batch_memory

    def observe(
        self, metrics: NodeMetrics, now: float, history: Mapping[str, Sequence[float]] | None = None
    ) -> Outcome:
        """Take one sample received at `now`; duplicates, stale and late samples change nothing but the window.

        `history` holds each batch workload's eviction times so far (every node, every replica): the input of the
        eviction budgets."""
        if metrics.node != self.node:
            raise InvalidInput("node", f"sample of {metrics.node!r} given to the tracker of {self.node!r}")
        check_sample(metrics)
        infos, usages = self._read(metrics)
        allowed = micro(metrics.batch_cpu_allowed) if metrics.batch_cpu_allowed is not None else self.commanded
        sample = Sample(metrics.time, micro(metrics.cpu_used), metrics.memory_used, allowed, usages)
        node = NodeSpec(self.node, micro(metrics.cpu_capacity), metrics.memory_total)
        point = window_point(sample, infos, node)
        if not self.window.add(point):
            return Outcome(accepted=False)
        if self.window.newest is not point:
            return Outcome(accepted=True)  # a late sample: counted in the window, the newer one already decided
        previous = self.window.points()[-2].time if len(self.window) > 1 else None
        interval = self.config.metrics_interval_seconds
        elapsed = interval if previous is None else min(metrics.time - previous, 2 * interval)
        add_work(self.work, usages, infos, elapsed)
        self.ls_peak.add(metrics.time, max(0, sample.node_cpu_used - point.batch_used))
        registry, last_seen = self.registry, self.last_seen
        registry.update(infos)
        for cid in infos:
            last_seen[cid] = metrics.time
        if len(last_seen) > len(infos):  # someone left: forget what is older than the window
            horizon = metrics.time - self.config.window_seconds
            for cid in [cid for cid, seen in last_seen.items() if seen <= horizon]:
                del last_seen[cid], registry[cid]
                self._facts.pop(cid, None)
        reserved_cpu, reserved_memory, batch_cpu, batch_memory = self._reservations(metrics, usages)
        self.pending = {
            cid: since
            for cid, since in self.pending.items()
            if cid in usages and now - since < self.eviction_retry_seconds
        }
        now = max(now, metrics.time)
        state = NodeState(
            self.last_cpu_eviction,
            self.last_memory_eviction,
            self.forbid_cpu,
            self.forbid_memory,
            frozenset(self.pending),
            workload_budgets(self.config, metrics.containers, history or {}),
            self.suppress_changed,
        )
        registry = with_work(registry, self.work)
        decision = decide(self.config, node, now, state, self.window.stats(now), point, registry)
        decision_id = f"{self.node}-{round(now * 1000)}"
        outcome = Outcome(accepted=True, decision_id=decision_id, decision=decision)

        def problem() -> dict[str, object]:
            return evict_problem(self.config, node, now, state, registry, self.window.points())

        if decision.victims:
            self._evict(decision, decision_id, now, registry, problem(), outcome)
        elif decision.refused:
            self._refuse(decision, decision_id, now, problem, outcome)
        self._suppress(decision, decision_id, now, node, sample, registry, problem, outcome)
        self.forbid_cpu, self.forbid_memory = decision.forbid_cpu, decision.forbid_memory
        # Batch is placed against what the node registered (a share of MemTotal, the cores it offers), never more.
        cpu_total, memory_total = registered_capacity(metrics, node)
        capacity = batch_capacity(cpu_total, memory_total, reserved_cpu, reserved_memory, batch_cpu, batch_memory)
        room_cpu = capacity.cpu
        if self.config.room_horizon_seconds > 0:
            self.room = min(cpu_total, peak_room(node.cpu, self.config.cpu_evict, self.ls_peak.peak, batch_cpu))
            room_cpu = min(room_cpu, self.room)
        if decision.fresh:  # a stale sample (a replay, a late delivery) says nothing about the node now
            batch_ids = frozenset(cid for cid, info in infos.items() if info.priority_class == BATCH)
            outcome.condition = self._condition(decision, now, node, sample, room_cpu, capacity.memory, batch_ids)
        return outcome

    def _evict(
        self,
        decision: Decision,
        decision_id: str,
        now: float,
        registry: dict[str, ContainerInfo],
        recorded: dict[str, object],
        outcome: Outcome,
    ) -> None:
        victims = [eviction_victim(v, registry) for v in decision.victims]
        reasons = sorted({v.reason for v in decision.victims})
        for victim in decision.victims:
            self.pending[victim.id] = now
            outcome.commands.append(
                NodeCommand(
                    command_id=f"{decision_id}-evict-{victim.id}",
                    node=self.node,
                    kind="evict",
                    container_id=victim.id,
                    reason=f"{victim.reason} eviction (decision {decision_id})",
                )
            )
        if any(v.reason == "memory" for v in decision.victims):
            self.last_memory_eviction = now
        if any(v.reason == "cpu-satisfaction" for v in decision.victims):
            self.last_cpu_eviction = now
        outcome.events.append(
            EvictionDecision(
                decision_id=f"{decision_id}-evict",
                node=self.node,
                time=now,
                kind="evict",
                reason=" + ".join(reasons),
                victims=victims,
                refused=refusals(decision),
                batch_cpu_allowed=None if decision.batch_cpu_allowed is None else cores(decision.batch_cpu_allowed),
                numbers=decision.explain,
                input=recorded,
                replica=self.replica,
            )
        )

    def _refuse(
        self,
        decision: Decision,
        decision_id: str,
        now: float,
        problem: Callable[[], dict[str, object]],
        outcome: Outcome,
    ) -> None:
        """A refusal event when the set of budget-kept victims changes (or once per refresh period while it lasts)."""
        ids = frozenset(r.id for r in decision.refused)
        last = self.last_refused
        if last is not None and last[0] == ids and now - last[1] < self.condition_refresh_seconds:
            return
        self.last_refused = (ids, now)
        outcome.events.append(
            EvictionDecision(
                decision_id=f"{decision_id}-refuse",
                node=self.node,
                time=now,
                kind="refuse",
                reason="eviction budget: the node is only suppressed",
                refused=refusals(decision),
                batch_cpu_allowed=None if decision.batch_cpu_allowed is None else cores(decision.batch_cpu_allowed),
                numbers=decision.explain,
                input=problem(),
                replica=self.replica,
            )
        )

    def _suppress(
        self,
        decision: Decision,
        decision_id: str,
        now: float,
        node: NodeSpec,
        sample: Sample,
        registry: dict[str, ContainerInfo],
        problem: Callable[[], dict[str, object]],
        outcome: Outcome,
    ) -> None:
        new, old = decision.batch_cpu_allowed, self.commanded
        if new is None and old is None:
            return
        going = {v.id for v in decision.victims} | set(self.pending)
        batch = [c for c in sample.containers if c in registry and registry[c].priority_class == BATCH]
        staying = [c for c in batch if c not in going]
        # While suppressed, a change of the batch set (an eviction, a new container) re-spreads the same allowance.
        same_set = new is None or frozenset(staying) == self.quota_set
        if new == old and same_set:
            return
        small = new is not None and old is not None and abs(new - old) < max(MIN_QUOTA_CHANGE, node.cpu // 100)
        if small and same_set:
            return
        caps = {c: cpu_cap(registry[c].cpu_limit, registry[c].cpu_cores, node.cpu) for c in staying}
        # Suppressed: each container's quota, within its own limit (water-filling); only changed quotas are sent.
        # Lifted: every staying container gets its own allocation back (quota None). The event shows every quota.
        spread = {} if new is None else spread_quota(new, [(c, registry[c].cpu_request, caps[c]) for c in staying])
        kind: Literal["suppress", "unsuppress"] = "unsuppress" if new is None else "suppress"
        sent: dict[str, int | None] = (
            dict.fromkeys(staying) if new is None else {c: q for c, q in spread.items() if self.quotas.get(c) != q}
        )
        for cid, quota in sent.items():
            outcome.commands.append(
                NodeCommand(
                    command_id=f"{decision_id}-{kind}-{cid}",
                    node=self.node,
                    kind="suppress",
                    container_id=cid,
                    cpu_quota=None if quota is None else cores(quota),
                    reason=f"{kind}: batch CPU allowed {'unlimited' if new is None else cores(new)} cores",
                )
            )
        self.quotas = spread
        if new != old:
            self.suppress_changed = now
        self.commanded = new
        self.quota_set = frozenset() if new is None else frozenset(staying)
        outcome.events.append(
            EvictionDecision(
                decision_id=f"{decision_id}-{kind}",
                node=self.node,
                time=now,
                kind=kind,
                reason=str(decision.explain.get("suppress", {}).get("why", kind)),
                batch_cpu_allowed=None if new is None else cores(new),
                quotas={cid: cores(spread.get(cid, caps[cid])) for cid in staying},
                numbers=decision.explain,
                input=problem(),
                replica=self.replica,
            )
        )

    def _condition(
        self,
        decision: Decision,
        now: float,
        node: NodeSpec,
        sample: Sample,
        batch_cpu: int,
        batch_memory: int,
        batch_ids: frozenset[str],
    ) -> NodeCondition | None:
        """The node's condition when something the allocator or an operator would act on changed since the last one
        sent, or its refresh is due: `condition_refresh_seconds` while the node runs batch containers, whose accounting
        the allocator's allowance relies on, `condition_floor_seconds` otherwise (docs/colocation.md "Conditions")."""
        state: WatermarkState = "normal"
        if self.pending:
            state = "evicting"
        elif decision.batch_cpu_allowed is not None:
            state = "suppressed"
        elif decision.forbid_cpu or decision.forbid_memory:
            state = "forbid"
        allowed = decision.batch_cpu_allowed
        evicting = sorted(self.pending)
        last = self.last_condition
        if last is not None and batch_ids == self.condition_batch:
            refresh = self.condition_refresh_seconds if batch_ids else self.condition_floor_seconds
            cpu_step = node.cpu * CAPACITY_CHANGE_PERCENT // 100
            memory_step = node.memory * CAPACITY_CHANGE_PERCENT // 100
            last_allowed = None if last.batch_cpu_allowed is None else micro(last.batch_cpu_allowed)
            same = (
                (last.state, last.forbid_schedule_cpu, last.forbid_schedule_memory, last.evicting)
                == (state, decision.forbid_cpu, decision.forbid_memory, evicting)
                and (last_allowed is None) == (allowed is None)
                and now - last.time < refresh
                and abs(batch_cpu - micro(last.batch_cpu_capacity)) < cpu_step
                and abs(batch_memory - last.batch_memory_capacity) < memory_step
                and abs((allowed or 0) - (last_allowed or 0)) < cpu_step
            )
            if same:
                return None  # nothing the allocator or an operator would act on: no message
        condition = NodeCondition(
            node=self.node,
            time=now,
            state=state,
            forbid_schedule_cpu=decision.forbid_cpu,
            forbid_schedule_memory=decision.forbid_memory,
            batch_cpu_allowed=None if allowed is None else cores(allowed),
            evicting=evicting,
            batch_cpu_capacity=cores(batch_cpu),
            batch_memory_capacity=batch_memory,
            cpu_percent=round(100 * sample.node_cpu_used / node.cpu, 2),
            memory_percent=round(100 * sample.node_memory_used / node.memory, 2),
            ls_cpu_peak=cores(self.ls_peak.peak) if self.config.room_horizon_seconds > 0 else None,
            room_cpu=cores(self.room) if self.config.room_horizon_seconds > 0 else None,
            room_horizon_seconds=self.config.room_horizon_seconds,
            room_covered_seconds=round(self.ls_peak.covered_seconds, 3),
            replica=self.replica,
            watermarks={name: getattr(self.config, name) for name in WATERMARK_FIELDS},
        )
        self.last_condition = condition
        self.condition_batch = batch_ids
        return condition
