"""Colocation on the real Docker engine (docs/colocation.md "On the real engine"): real nats-server, the eviction
service, a real node agent; an LS container whose busy loops are switched on and off from inside, batch containers
bound to a core and unbound. What the engine really holds is inspected at every sample.

Reactions are counted in samples (their own timestamps), never in the test's wall-clock: the machine is shared.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from typing import Any

import aiodocker
import pytest
import pytest_asyncio
from engine_node import BUSY, HOG, MIB, Bus, create, decision_time, engine_agent, host_config, ls_command, switch, watch
from eviction_helpers import start_replica

from eru.domain.resources import Allocation
from eru.nodeagent.engine import parse_cpuset

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]
INTERVAL = 1.0
CORES = 2  # the machine's cores: the node registers what is real
LINE = 0.08  # cores: cpu_suppress 4 % of 2 cores (the LS loops get ~0.06–0.2 core on the loaded 2-core machine)
DWELL = 3.0
# Test A: suppression and lift only (no eviction). Test B: eviction (CPU by satisfaction, memory).
SUPPRESS: dict[str, Any] = {
    "cpu_forbid": 4,
    "cpu_suppress": 4,
    "cpu_evict": 100,
    "memory_forbid": 100,
    "memory_evict": 100,
    "suppress_hysteresis": 1,
    "suppress_dwell_seconds": DWELL,
    "metrics_interval_seconds": INTERVAL,
    "window_seconds": 10,
}
EVICT: dict[str, Any] = {
    **SUPPRESS,
    "cpu_evict": 4,
    "memory_forbid": 40,
    "memory_evict": 40,  # of the node's 128 MiB: the hog's 64 MiB is 50 %
    "batch_util_threshold": 70,  # a 1 %-of-a-core quota is measured at 0.7–1.2 % on the loaded machine
    "window_seconds": 4,
    "cpu_cooldown_seconds": 2,
    "memory_cooldown_seconds": 1,
}
NODE_MEMORY = 128 * MIB
# A light periodic load bound to core 1: a busy bound batch container alone would use a whole core on an idle
# machine, above any line an LS load can cross on the loaded 2-core machine (the node would then rightly stay
# suppressed with LS idle); the CPU-bound bound container is in the eviction test.
LIGHT = "while :; do j=0; while [ $j -lt 200 ]; do j=$((j+1)); done; sleep 1; done"


@pytest_asyncio.fixture
async def docker(docker_engine: str | None) -> AsyncIterator[aiodocker.Docker]:
    client = aiodocker.Docker(url=docker_engine)
    try:
        yield client
    finally:
        await client.close()


def resources(host: dict[str, Any]) -> dict[str, Any]:
    """What a lift must restore exactly (the engine shows "no quota" as 0 or -1)."""
    keys = ("CpusetCpus", "CpuShares", "CpuPeriod", "Memory")
    return {**{k: host[k] for k in keys}, "CpuQuota": max(0, host["CpuQuota"])}


class Engine:
    """Inspects the engine at every sample and checks the invariants: a batch quota never above its own limit, a
    bound container's cpuset never changed, the LS container never touched."""

    def __init__(self, docker: aiodocker.Docker, bus: Bus, ls: str, limits: dict[str, int], own: dict[str, Any]):
        self.docker, self.bus, self.ls, self.limits, self.own = docker, bus, ls, limits, own
        self.seen: dict[str, list[dict[str, Any]]] = {cid: [] for cid in [ls, *limits]}
        self.gone: set[str] = set()

    async def observe(self) -> None:
        for cid in self.seen:
            if cid in self.gone:
                continue
            try:
                host = await host_config(self.docker, cid)
            except aiodocker.DockerError as error:
                if error.status == 404:
                    self.gone.add(cid)
                    continue
                raise
            self.seen[cid].append(host)
            if cid == self.ls:
                assert resources(host) == resources(self.own[cid]), "the LS container was touched"
                continue
            assert 0 < host["CpuQuota"] <= self.limits[cid] or host["CpuQuota"] in (0, -1), (cid, host["CpuQuota"])
            if self.own[cid]["CpusetCpus"] and self.limits[cid] == 100_000:
                assert parse_cpuset(host["CpusetCpus"]) == parse_cpuset(self.own[cid]["CpusetCpus"]), host

    async def until(self, check: Any, within: float, what: str) -> Any:
        """Wait for `check()`, inspecting the engine at every new sample."""
        count = len(self.bus.samples)

        def step() -> Any:
            return check() or (len(self.bus.samples) > count and "sample")

        while True:
            found = await self.bus.until(step, within, what)
            if found != "sample":
                await self.observe()
                return found
            count = len(self.bus.samples)
            await self.observe()


def index_at(bus: Bus, time: float) -> int:
    """The index of the sample that decided a command made at `time` (`decision_time`): the newest sample taken by
    then (the replica decides each sample as it arrives; agent and replica share this machine's clock)."""
    return max(i for i, s in enumerate(bus.samples) if s.time <= time)


def lifted_both(commands: list[Any], batch: set[str]) -> list[Any]:
    """The lift commands among `commands` once every container of `batch` has one, else []."""
    lifts = [c for c in commands if c.kind == "suppress" and c.cpu_quota is None]
    return lifts if {c.container_id for c in lifts} >= batch else []


def ls_used(bus: Bus, index: int, ls: str) -> float:
    return next((c.cpu_used for c in bus.samples[index].containers if c.container_id == ls), 0.0)


async def test_ls_load_suppresses_batch_inside_its_limits_and_stopping_it_lifts_exactly(
    nats_url: str, nc: Any, js: Any, busybox_image: str, docker_node: str, docker: aiodocker.Docker
) -> None:
    node = docker_node
    bus = await watch(nc, node)
    replica = await start_replica(nats_url, "r1", nodes={node: SUPPRESS})
    try:
        async with engine_agent(js, node, INTERVAL, NODE_MEMORY):
            ls = await create(
                js,
                bus,
                node,
                busybox_image,
                ls_command(2),
                priority_class="prod",
                cpu_request=1.5,
                allocation=Allocation(memory=16 * MIB),
                name="ls",
            )
            unbound = await create(
                js,
                bus,
                node,
                busybox_image,
                ["sh", "-c", BUSY],
                priority_class="batch",
                cpu_request=0.02,
                allocation=Allocation(memory=16 * MIB, cpu_limit=0.02),
                name="bu",
            )
            bound = await create(
                js,
                bus,
                node,
                busybox_image,
                ["sh", "-c", LIGHT],
                priority_class="batch",
                cpu_request=0.5,
                allocation=Allocation(cpu_map={"1": 100}, memory=16 * MIB, cpu_bind=True),
                name="bb",
            )
            own = {cid: await host_config(docker, cid) for cid in (ls, unbound, bound)}
            engine = Engine(docker, bus, ls, {unbound: 2_000, bound: 100_000}, own)

            def measured(i: int) -> bool:
                return {ls, unbound, bound} <= {c.container_id for c in bus.samples[i].containers}

            start = len(bus.samples)
            await engine.until(lambda: sum(measured(i) for i in range(start, len(bus.samples))) >= 3, 60, "3 samples")
            assert not [c for c in bus.commands if c.kind == "suppress"], "suppressed before any LS load"

            for cycle in range(2):  # the load switched on and off twice
                before = len(bus.commands)
                await switch(docker, ls, [0, 1], on=True)
                cut = await engine.until(
                    lambda b=before: [c for c in bus.commands[b:] if c.kind == "suppress" and c.cpu_quota is not None],
                    60,
                    f"cycle {cycle}: suppressed",
                )
                # (1) from the first sample at or above the suppress line to the sample that cut: at most 2 intervals
                decided = index_at(bus, decision_time(cut[0]))
                first = next(i for i in range(decided + 1) if bus.samples[i].cpu_used >= LINE and i >= start)
                assert decided - first <= 2, [round(s.cpu_used, 3) for s in bus.samples[first : decided + 1]]
                await engine.until(
                    lambda: all(engine.seen[c] and engine.seen[c][-1]["CpuQuota"] == 1_000 for c in (unbound, bound)),
                    60,
                    f"cycle {cycle}: squeezed on the engine",
                )
                start = len(bus.samples)
                before = len(bus.commands)
                await switch(docker, ls, [0, 1], on=False)
                lifts = await engine.until(
                    lambda b=before: lifted_both(bus.commands[b:], {unbound, bound}),
                    60,
                    f"cycle {cycle}: lifted",
                )
                # (3) lifted within two dwells and two intervals of the first sample without the load (sample time)
                lifted = index_at(bus, decision_time(lifts[-1]))
                quiet = next(i for i in range(start, lifted + 1) if ls_used(bus, i, ls) < LINE / 2)
                bound_time = 2 * DWELL + 2 * INTERVAL
                elapsed = bus.samples[lifted].time - bus.samples[quiet].time
                assert elapsed <= bound_time + INTERVAL / 2, (elapsed, math.ceil(bound_time / INTERVAL))
                await engine.until(
                    lambda: all(
                        engine.seen[c] and resources(engine.seen[c][-1]) == resources(own[c]) for c in (unbound, bound)
                    ),
                    60,
                    f"cycle {cycle}: restored exactly",
                )
                start = len(bus.samples)
            # (6) the LS container is never named in a command
            assert all(c.container_id != ls for c in bus.commands if c.kind != "create")  # the test's own create
            assert all(len(engine.seen[c]) >= 5 for c in engine.seen), {c: len(v) for c, v in engine.seen.items()}
    finally:
        await replica.stop()


async def test_persistent_load_evicts_by_satisfaction_and_a_memory_hog_is_evicted(
    nats_url: str, nc: Any, js: Any, busybox_image: str, docker_node: str, docker: aiodocker.Docker
) -> None:
    node = docker_node
    bus = await watch(nc, node)
    replica = await start_replica(nats_url, "r1", nodes={node: EVICT})
    try:
        async with engine_agent(js, node, INTERVAL, NODE_MEMORY):
            ls = await create(
                js,
                bus,
                node,
                busybox_image,
                ls_command(2),
                priority_class="prod",
                cpu_request=1.5,
                allocation=Allocation(memory=16 * MIB),
                name="ls",
            )
            unbound = await create(
                js,
                bus,
                node,
                busybox_image,
                ["sh", "-c", BUSY],
                priority_class="batch",
                cpu_request=0.5,
                allocation=Allocation(memory=16 * MIB, cpu_limit=0.5),
                name="bu",
            )
            bound = await create(
                js,
                bus,
                node,
                busybox_image,
                ["sh", "-c", BUSY],
                priority_class="batch",
                cpu_request=1,
                allocation=Allocation(cpu_map={"1": 100}, memory=16 * MIB, cpu_bind=True),
                name="bb",
            )
            own = {cid: await host_config(docker, cid) for cid in (ls, unbound, bound)}
            engine = Engine(docker, bus, ls, {unbound: 50_000, bound: 100_000}, own)
            await switch(docker, ls, [0, 1], on=True)
            # (4) the load persists: batch squeezed to its floor, its satisfaction far below 60 % → CPU eviction
            evicted = await engine.until(
                lambda: (
                    {c.container_id for c in bus.commands if c.kind == "evict"} >= {unbound, bound}
                    and [c for c in bus.commands if c.kind == "evict"]
                ),
                120,
                "CPU eviction of both batch containers",
            )
            assert {c.reason.split()[0] for c in evicted if c.reason} <= {"cpu-satisfaction"}, evicted
            await engine.until(lambda: {unbound, bound} <= engine.gone, 60, "batch removed by the agent")
            # (5) a memory hog: 64 MiB of the node's 128 MiB, over the 40 % memory evict line
            hog = await create(
                js,
                bus,
                node,
                busybox_image,
                ["sh", "-c", HOG],
                priority_class="batch",
                cpu_request=0.01,
                allocation=Allocation(memory=96 * MIB),
                name="hog",
            )
            engine.seen[hog], engine.limits[hog] = [], 100_000 * CORES
            engine.own[hog] = await host_config(docker, hog)
            kill = await engine.until(
                lambda: next((c for c in bus.commands if c.kind == "evict" and c.container_id == hog), None),
                60,
                "memory eviction of the hog",
            )
            assert kill.reason is not None
            assert kill.reason.startswith("memory"), kill.reason
            await engine.until(lambda: hog in engine.gone, 60, "hog removed")
            assert all(c.container_id != ls for c in bus.commands if c.kind != "create")  # (6)
            await switch(docker, ls, [0, 1], on=False)
    finally:
        await replica.stop()
