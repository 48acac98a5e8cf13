"""`eru sim colocation` (docs/colocation.md "The experiment"): batch work on nodes whose latency-sensitive load
oscillates, with eru's REAL pure functions in the loop — the eviction service's `NodeTracker` (watermarks,
suppression, eviction, budgets, peak-sized room) fed a sample per node every 5 s, and the allocator's batch placement
(`plan_deploy` against each node's published condition less what was placed since, forbid flags, eviction memory).

The world around them is simple and stated: a batch instance is CPU-bound at its request; latency-sensitive (prod)
containers take the CPU they want first (CFS weights), batch shares what is left, then its CFS quota when suppressed;
an evicted instance loses all the work it did (no checkpoint) and starts over wherever it is placed next. Pure: no
clock, no I/O, the same seed gives the same run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from eru.colocation.backoff import Eviction, KeepConfig, avoided_nodes, gives_up, replacement_delay
from eru.colocation.config import ColocationConfig, pod_budget
from eru.colocation.tracker import NodeTracker
from eru.domain.colocation import NodeCondition
from eru.domain.messages import ContainerMetrics, NodeMetrics
from eru.planning import NodeResources, NormalizedRequest, PlanningConfig, charge, plan_deploy, release
from eru.planning.batch import less_placed
from eru.planning.capacity import node_capacities
from eru.sim.coloc_model import GIB, Instance, Policy, Scenario, Totals, colocation_config
from eru.sim.coloc_traces import NodeTrace

T0 = 1_000_000.0  # simulated epoch: sample times stay positive through the warm-up
WORKLOAD = "web-batch"
PIECES = 100


class ColocationSim:
    """One run: `run()` steps the world and returns the summary."""

    def __init__(
        self,
        scenario: Scenario,
        traces: list[NodeTrace],
        policy: Policy,
        config: ColocationConfig | None = None,
        keep: KeepConfig | None = None,
    ) -> None:
        self.s = scenario
        self.traces = traces
        self.policy = policy
        self.config = colocation_config(policy, config or ColocationConfig())
        self.keep = keep or KeepConfig()
        self.names = [f"n{i + 1}" for i in range(scenario.nodes)]
        self.trackers = {n: NodeTracker(n, self.config, condition_refresh_seconds=30.0) for n in self.names}
        core_map = {str(c): PIECES for c in range(scenario.cores)}
        self.resources = {n: NodeResources(n, core_map, scenario.node_memory) for n in self.names}
        self.conditions: dict[str, NodeCondition] = {}
        self.instances = [Instance(f"i{i:02d}") for i in range(scenario.instances)]
        self.request = NormalizedRequest(
            False, scenario.instance_cpu * PIECES, 0, scenario.instance_memory, 0, False, True
        )
        self.planning = PlanningConfig()
        self.totals = Totals()

    # -- the node side -------------------------------------------------------------------------------------------
    def _sample(self, node: str, index: int, t: float) -> NodeMetrics:
        s = self.s
        ls = self.traces[index].at(t) * s.cores
        running = [i for i in self.instances if i.node == node]
        demand = {
            i.container: float(s.instance_cpu if i.quota is None else min(s.instance_cpu, i.quota)) for i in running
        }
        left = max(0.0, s.cores - ls)
        scale = min(1.0, left / sum(demand.values())) if demand else 1.0
        used = {cid: d * scale for cid, d in demand.items()}
        batch = sum(used.values())
        if t >= 0:
            for instance in running:
                instance.progress += used[instance.container] * s.step_seconds
            self._satisfaction(ls, batch)
            self._reclaim(ls, batch)
        containers = [
            ContainerMetrics(
                container_id=f"ls-{node}",
                priority_class="prod",
                priority=10,
                tenant="default",
                cpu_used=round(ls, 6),
                memory_used=40 * GIB,
                cpu_request=s.cores * s.ls_request_share,
                memory_request=48 * GIB,
            )
        ]
        for instance in running:
            containers.append(
                ContainerMetrics(
                    container_id=instance.container,
                    priority_class="batch",
                    priority=0,
                    tenant="default",
                    cpu_used=round(used[instance.container], 6),
                    memory_used=s.instance_memory // 2,
                    cpu_request=float(s.instance_cpu),
                    cpu_limit=float(s.instance_cpu),  # CPU-bound at its request, which is also its limit
                    memory_request=s.instance_memory,
                    workload=WORKLOAD,
                    desired=s.instances,
                    evictions=len(instance.evictions),
                )
            )
        return NodeMetrics(
            node=node,
            time=T0 + t,
            cpu_capacity=float(s.cores),
            cpu_used=round(ls + batch, 6),
            memory_used=40 * GIB + len(running) * (s.instance_memory // 2),
            memory_total=s.node_memory,
            containers=containers,
        )

    def _satisfaction(self, ls: float, batch: float) -> None:
        """LS is satisfied in a node-sample when batch does not push the node over the evict watermark (samples where
        the latency-sensitive load alone is over it are not batch's doing and are left out)."""
        line = self.s.cores * self.config.cpu_evict / 100
        if ls < line:
            self.totals.ls_samples += 1
            if ls + batch < line:
                self.totals.ls_satisfied += 1

    def _reclaim(self, ls: float, batch: float) -> None:
        """What batch used of the room under the suppress line (capacity × suppress % − LS, never below 0)."""
        totals, cores = self.totals, float(self.s.cores)
        totals.node_used += min(cores, ls + batch)
        totals.node_capacity += cores
        totals.batch_used += batch
        totals.room += max(0.0, cores * self.config.cpu_suppress / 100 - ls)

    def _observe(self, t: float) -> None:
        by_container = {i.container: i for i in self.instances if i.node is not None}
        for index, node in enumerate(self.names):
            # the budget's shared history, as the service's claim makes it: every eviction so far, any node
            history = {WORKLOAD: [T0 + e.time for e in self.totals.evictions]}
            outcome = self.trackers[node].observe(self._sample(node, index, t), T0 + t, history)
            for command in outcome.commands:
                instance = by_container.get(command.container_id)
                if instance is None or instance.node != node:
                    continue
                if command.kind == "evict":
                    self._evict(instance, t)
                elif command.kind == "suppress":
                    instance.quota = command.cpu_quota  # None: lifted, the instance has its own limit back
            self.totals.refusals += sum(len(e.refused) for e in outcome.events if e.kind == "refuse")
            if outcome.condition is not None:
                self.conditions[node] = outcome.condition
            if self.trackers[node].commanded is not None and t >= 0:
                self.totals.suppressed_samples += 1

    def _evict(self, instance: Instance, t: float) -> None:
        assert instance.node is not None
        assert instance.plan is not None
        self.totals.evictions.append(Eviction(WORKLOAD, instance.lineage, instance.node, t))
        self.resources[instance.node] = release(self.resources[instance.node], instance.plan)
        self.totals.lost += instance.progress
        instance.progress = 0.0
        instance.node, instance.plan, instance.quota = None, None, None
        instance.evictions.append(t)
        instance.generation += 1
        if not self.policy.keep:
            instance.ready_at = t + self.s.resubmit_seconds
        elif gives_up(instance.evictions, self.keep):
            instance.gave_up_at = t
        else:
            instance.ready_at = t + replacement_delay(instance.evictions, t, self.keep)

    # -- the allocator side -------------------------------------------------------------------------------------
    def _snapshot(self, t: float) -> tuple[list[NodeResources], dict[str, str]]:
        """The allocator's view: nodes not forbidding batch, their allowance less what was placed since the
        condition, minus the nodes the eviction memory avoids (docs/colocation.md)."""
        avoided = avoided_nodes(self.totals.evictions, WORKLOAD, t, self.keep) if self.policy.node_backoff else {}
        nodes = []
        for name in self.names:
            condition = self.conditions.get(name)
            node = self.resources[name]
            if name in avoided or (condition is not None and condition.forbid_schedule):
                continue
            if condition is not None:
                since = [i for i in self.instances if i.node == name and T0 + i.placed_at > condition.time]
                allowance = (int(condition.batch_cpu_capacity * PIECES), condition.batch_memory_capacity)
                cpu, memory = less_placed(
                    allowance, len(since) * self.request.cpu_request, len(since) * self.request.memory_request
                )
                node = replace(node, batch_cpu=cpu, batch_memory=memory)
            nodes.append(node)
        return nodes, {n: a.explain() for n, a in avoided.items()}

    def _place(self, t: float) -> None:
        ready = [
            i
            for i in self.instances
            if i.node is None and i.done_at is None and i.gave_up_at is None and i.ready_at <= t
        ]
        if not ready:
            return
        nodes, _ = self._snapshot(t)
        if not nodes:
            return
        total = sum(node_capacities(nodes, self.request, self.planning).values())
        count = min(total, len(ready))
        if count == 0:
            return
        live = Counter(i.node for i in self.instances if i.node is not None)
        plan = plan_deploy(nodes, self.request, self.planning, mode="auto", count=count, counts=dict(live))
        memory = avoided_nodes(self.totals.evictions, WORKLOAD, t, self.keep)
        for instance, container in zip(sorted(ready, key=lambda i: i.ready_at), plan.containers, strict=False):
            node = container.node
            if instance.evictions:
                self.totals.replacements += 1
                if node in memory:
                    self.totals.back_within_backoff += 1
            instance.node, instance.plan, instance.placed_at = node, container, t
            self.resources[node] = charge(self.resources[node], [container])

    # -- the run ------------------------------------------------------------------------------------------------
    def run(self) -> dict[str, Any]:
        """Step the world from the warm-up to the end; the summary (docs/colocation.md "The experiment")."""
        s = self.s
        steps_warm = int(s.warmup_seconds // s.step_seconds)
        steps = int(s.hours * 3600 // s.step_seconds)
        series = self.totals.series
        for key in ("t", "running", "waiting", "evictions", "ls_mean", "room"):
            series[key] = []
        for step in range(-steps_warm, steps):
            t = step * s.step_seconds
            if t >= 0:
                self._place(t)
            self._observe(t)
            if t < 0:
                continue
            for instance in self.instances:
                if instance.node is not None and instance.progress >= s.job_cpu_seconds:
                    instance.done_at = t
                    assert instance.plan is not None
                    self.resources[instance.node] = release(self.resources[instance.node], instance.plan)
                    instance.node, instance.plan = None, None
                elif instance.node is None and instance.done_at is None and instance.gave_up_at is None:
                    instance.waiting += s.step_seconds
            if step % 6 == 0:
                self._record(t)
        return self.summary()

    def _record(self, t: float) -> None:
        series = self.totals.series
        series["t"].append(t / 60)
        series["running"].append(sum(1 for i in self.instances if i.node is not None))
        series["waiting"].append(
            sum(1 for i in self.instances if i.node is None and i.done_at is None and i.gave_up_at is None)
        )
        series["evictions"].append(len(self.totals.evictions))
        series["ls_mean"].append(100 * sum(tr.at(t) for tr in self.traces) / len(self.traces))
        rooms = [c.batch_cpu_capacity for c in self.conditions.values()]
        series["room"].append(sum(rooms))
        for index, name in enumerate(self.names[:3]):
            series.setdefault(f"ls_{name}", []).append(100 * self.traces[index].at(t))
            running = sum(1 for i in self.instances if i.node == name)
            series.setdefault(f"batch_{name}", []).append(running)

    def summary(self) -> dict[str, Any]:
        """The figures the issue asks for, and what they were computed from."""
        s, totals = self.s, self.totals
        end = s.hours * 3600
        lifetimes = [
            (i.done_at if i.done_at is not None else i.gave_up_at if i.gave_up_at is not None else end)
            for i in self.instances
        ]
        job_hours = sum(lifetimes) / 3600
        per_instance = Counter(e.instance for e in totals.evictions)
        times = sorted(e.time for e in totals.evictions)
        window = self.config.budget_window_seconds
        peak, start = 0, 0
        for index, moment in enumerate(times):
            while times[start] <= moment - window:
                start += 1
            peak = max(peak, index - start + 1)
        useful = sum(i.progress if i.done_at is None else s.job_cpu_seconds for i in self.instances)
        placed = sum(1 for i in self.instances if i.done_at is not None or i.node is not None or i.evictions)
        done = useful + totals.lost
        steps = max(1, int(end // s.step_seconds))
        return {
            "policy": self.policy.name(),
            "pieces": {k: getattr(self.policy, k) for k in ("peak_room", "node_backoff", "budget", "progress", "keep")},
            "instances": s.instances,
            "job_hours": round(job_hours, 2),
            "evictions": len(totals.evictions),
            "evictions_per_job_hour": round(len(totals.evictions) / job_hours, 3) if job_hours else 0.0,
            "instances_evicted_3_or_more": sum(1 for n in per_instance.values() if n >= 3),
            "share_evicted_3_or_more": round(sum(1 for n in per_instance.values() if n >= 3) / s.instances, 4),
            "replacements": totals.replacements,
            "placed_back_within_backoff": totals.back_within_backoff,
            "largest_share_evicted_in_window": round(peak / s.instances, 4),
            "largest_evicted_in_window": peak,
            "budget_allowed_per_window": pod_budget(self.config).allowed(s.instances),
            "window_seconds": window,
            "budget": self.config.max_unavailable,
            "work_lost_share": round(totals.lost / done, 4) if done else 0.0,
            "batch_cpu_hours_done": round(done / 3600, 2),
            "batch_cpu_hours_kept": round(useful / 3600, 2),
            "jobs_completed": sum(1 for i in self.instances if i.done_at is not None),
            "gave_up": sum(1 for i in self.instances if i.gave_up_at is not None),
            "waiting_share": round(sum(i.waiting for i in self.instances) / (job_hours * 3600), 4)
            if job_hours
            else 0.0,
            "budget_refusals": totals.refusals,
            "suppressed_share": round(totals.suppressed_samples / (steps * s.nodes), 4),
            "ls_satisfaction": round(totals.ls_satisfied / totals.ls_samples, 4) if totals.ls_samples else 1.0,
            "node_cpu_utilization_mean": round(totals.node_used / totals.node_capacity, 4)
            if totals.node_capacity
            else 0.0,
            "reclaim_ratio": round(totals.batch_used / totals.room, 4) if totals.room else 0.0,
            "jobs_placed": placed,
            **({"why_nothing_placed": self._why_nothing_placed()} if placed == 0 else {}),
        }

    def _why_nothing_placed(self) -> str:
        """In words, why no batch instance was ever placed (the experiment's honest answer for such a pod)."""
        peaks = [
            max(tr.at(t * self.s.step_seconds) for t in range(int(self.s.hours * 3600 // self.s.step_seconds)))
            for tr in self.traces
        ]
        lowest = min(peaks) if peaks else 0.0
        return (
            f"no node ever offered batch room: every node's latency-sensitive peak ({lowest:.0%} of CPU or more) "
            f"leaves less than one {self.s.instance_cpu}-core instance under the {self.config.cpu_evict} % evict "
            f"watermark, so placing batch there would only have it evicted at the next peak"
        )


def run_colocation(
    scenario: Scenario,
    traces: list[NodeTrace],
    policies: Mapping[str, Policy],
    config: ColocationConfig | None = None,
    keep: KeepConfig | None = None,
) -> dict[str, tuple[dict[str, Any], dict[str, list[float]]]]:
    """Each policy over the same scenario and traces: {name: (summary, series for the plots)}."""
    results = {}
    for name, policy in policies.items():
        sim = ColocationSim(scenario, traces, policy, config, keep)
        results[name] = (sim.run(), sim.totals.series)
    return results
