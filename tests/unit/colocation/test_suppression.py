"""Suppression that respects each container and lets go (docs/colocation.md "Suppression"): quotas within each
container's own limit, lifting CPU-bound batch once the latency-sensitive load falls, a steady allowance under a
steady noisy load. A tiny world plays the engine: a container uses min(its demand, the quota in force)."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field, replace

from eru.colocation.config import ColocationConfig
from eru.colocation.plan_kind import evict_problem, solve_evict
from eru.colocation.policy import NodeSpec, NodeState
from eru.colocation.tracker import NodeTracker
from eru.domain import ContainerMetrics, NodeMetrics
from eru.domain.messages import NodeCommand

GIB = 1024**3
# The real node: 2 cores, an LS container, CPU-bound batch containers of 0.1 core (`--cpu-limit 0.1`).
CONFIG = ColocationConfig(
    cpu_forbid=65,
    cpu_suppress=65,
    cpu_evict=75,
    window_seconds=60,
    metrics_interval_seconds=1,
    cpu_cooldown_seconds=20,
    suppress_dwell_seconds=5,
)


@dataclass
class Batch:
    cpu_limit: float = 0.1
    cpu_cores: int = 0  # bound to this many cores (cpu_limit then 0)
    demand: float = 1.0  # `yes > /dev/null`: one busy thread


@dataclass
class World:
    """The engine as the suppression sees it: quotas applied by the agent on top of each container's own limit."""

    batch: dict[str, Batch]
    ls: float = 0.0
    quota: dict[str, float | None] = field(default_factory=dict)
    commands: list[NodeCommand] = field(default_factory=list)

    def own_limit(self, cid: str) -> float:
        spec = self.batch[cid]
        return float(spec.cpu_cores) if spec.cpu_cores else spec.cpu_limit or 2.0

    def used(self, cid: str) -> float:
        quota = self.quota.get(cid)
        limit = self.own_limit(cid) if quota is None else min(quota, self.own_limit(cid))
        return min(self.batch[cid].demand, limit)

    def sample(self, at: float) -> NodeMetrics:
        containers = [
            ContainerMetrics(
                container_id="ls",
                priority_class="prod",
                priority=0,
                tenant="t",
                cpu_used=self.ls,
                memory_used=GIB,
                cpu_request=1,
                memory_request=GIB,
            )
        ] + [
            ContainerMetrics(
                container_id=cid,
                priority_class="batch",
                priority=1,
                tenant="t",
                cpu_used=self.used(cid),
                memory_used=GIB // 8,
                cpu_request=spec.cpu_limit or spec.cpu_cores,
                cpu_limit=spec.cpu_limit,
                cpu_cores=spec.cpu_cores,
                memory_request=GIB // 8,
            )
            for cid, spec in sorted(self.batch.items())
        ]
        node = self.ls + sum(self.used(cid) for cid in self.batch)
        return NodeMetrics(
            node="n1",
            time=at,
            cpu_capacity=2,
            cpu_used=node,
            memory_used=4 * GIB,
            memory_total=16 * GIB,
            containers=containers,
        )

    def run(self, tracker: NodeTracker, start: float, seconds: int) -> None:
        for step in range(seconds):
            at = start + step
            outcome = tracker.observe(self.sample(at), at)
            for command in outcome.commands:
                if command.kind == "suppress":
                    self.quota[command.container_id] = command.cpu_quota
                    self.commands.append(command)


def test_quotas_never_exceed_a_containers_own_limit_and_suppression_is_lifted_when_ls_load_falls() -> None:
    world = World({"b1": Batch(), "b2": Batch()})
    tracker = NodeTracker("n1", CONFIG)
    world.ls = 0.1
    world.run(tracker, 100.0, 5)
    assert world.commands == []  # 0.3 cores of 2: nothing to do
    world.ls = 1.5  # busy loops: node 1.7 of 2 ≥ 65 %
    world.run(tracker, 105.0, 2)
    assert tracker.commanded is not None
    assert {c.container_id for c in world.commands} == {"b1", "b2"}
    world.run(tracker, 107.0, 30)  # while the load lasts the target hovers near its cut: no raise above the limits
    assert all(c.cpu_quota is None or c.cpu_quota <= 0.1 for c in world.commands)
    world.ls = 0.1  # the busy loops stop
    lifted_at = None
    for second in range(137, 137 + 60):
        world.run(tracker, float(second), 1)
        if tracker.commanded is None:
            lifted_at = second
            break
    assert lifted_at is not None, "suppression never lifted: the allowance only climbs"
    assert lifted_at - 137 <= CONFIG.suppress_dwell_seconds + 2  # the dwell after the cut, then lifted at once
    assert world.quota == {"b1": None, "b2": None}  # each container has its own allocation back
    assert all(c.cpu_quota is None or c.cpu_quota <= 0.1 + 1e-9 for c in world.commands)


def test_a_bound_container_is_suppressed_within_its_own_cores() -> None:
    world = World({"bound": Batch(cpu_limit=0.0, cpu_cores=1, demand=1.0), "free": Batch(cpu_limit=0.0, demand=2.0)})
    tracker = NodeTracker("n1", CONFIG)
    world.ls = 0.2
    world.run(tracker, 100.0, 3)  # 0.2 + 1 + 0.8 (the node is full): 100 % ≥ 65 %: suppressed at once
    assert tracker.commanded is not None
    quotas = {c.container_id: c.cpu_quota for c in world.commands}
    assert quotas["bound"] is not None
    assert quotas["bound"] <= 1.0
    world.ls = 1.2  # LS rises: the allowance shrinks; the bound one is never handed more than its one core
    world.run(tracker, 103.0, 20)
    assert all(c.cpu_quota is None or c.cpu_quota <= 1.0 for c in world.commands if c.container_id == "bound")


def test_a_steady_noisy_load_does_not_make_the_allowance_oscillate() -> None:
    """The issue: under a noisy but steady host load the allowance went 0 → 0.2 → 0 → 0.06 → 0.19 → 0 every 5-25 s.
    LS noise of ±0.04 cores (peak to peak 0.08 < the 5 % band of 0.1 core) around 1.1 cores, batch unbounded."""
    rng = random.Random(7)
    world = World({"b1": Batch(cpu_limit=0.0, demand=2.0), "b2": Batch(cpu_limit=0.0, demand=2.0)})
    tracker = NodeTracker("n1", CONFIG)
    world.ls = 1.1
    world.run(tracker, 100.0, 3)
    assert tracker.commanded is not None
    settled = len(world.commands)
    allowances = []
    for second in range(103, 103 + 600):
        world.ls = 1.1 + rng.uniform(-0.04, 0.04)
        world.run(tracker, float(second), 1)
        allowances.append(tracker.commanded)
    assert len(world.commands) == settled, [c.cpu_quota for c in world.commands[settled:]][:10]
    assert len(set(allowances)) == 1


def test_a_noisier_load_changes_the_allowance_at_most_once_per_dwell_when_raising() -> None:
    rng = random.Random(11)
    world = World({"b1": Batch(cpu_limit=0.0, demand=2.0)})
    tracker = NodeTracker("n1", CONFIG)
    world.ls = 1.0
    changes: list[tuple[float, bool]] = []  # (time, whether it raised or lifted the allowance)
    last: int | None = None
    for second in range(100, 700):
        world.ls = 1.0 + rng.uniform(-0.15, 0.15)  # peak to peak 0.3 cores, three times the band
        world.run(tracker, float(second), 1)
        now = tracker.commanded
        if now != last and second > 100:
            changes.append((float(second), last is not None and (now is None or now > last)))
        last = now
    # Cuts are never delayed (the LS load comes first); a raise or a lift comes at least one dwell after the
    # previous change, so there are at most two changes per dwell.
    assert changes
    for (before, _), (at, raised) in itertools.pairwise(changes):
        if raised:
            assert at - before >= CONFIG.suppress_dwell_seconds
    assert len(changes) <= 2 * 600 / CONFIG.suppress_dwell_seconds


def test_the_dwell_is_part_of_the_recorded_input_and_replays() -> None:
    world = World({"b1": Batch(cpu_limit=0.0, demand=2.0)})
    tracker = NodeTracker("n1", replace(CONFIG, suppress_dwell_seconds=30))
    world.ls = 1.0
    world.run(tracker, 100.0, 3)
    assert tracker.suppress_changed is not None
    world.ls = 0.2  # LS falls: the target is far above the allowance, but the dwell is not over
    outcome = tracker.observe(world.sample(103.0), 103.0)
    assert outcome.decision is not None
    assert outcome.decision.explain["suppress"]["dwell_over"] is False
    assert not [e for e in outcome.events if e.kind in ("suppress", "unsuppress")]
    state = NodeState(suppress_changed=tracker.suppress_changed)
    problem = evict_problem(
        tracker.config, NodeSpec("n1", 2_000_000, 16 * GIB), 103.0, state, tracker.registry, tracker.window.points()
    )
    replayed = solve_evict(problem)
    assert replayed["explain"]["suppress"] == outcome.decision.explain["suppress"]
    later = solve_evict({**problem, "suppress_changed": 60.0})  # a change long ago: the raise goes ahead
    assert later["explain"]["suppress"]["dwell_over"] is True
