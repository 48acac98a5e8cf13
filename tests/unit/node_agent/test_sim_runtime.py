"""The simulated runtime without a bus: lifecycle, load models under a driven clock, limits, determinism."""

from __future__ import annotations

import json

import pytest

from eru.domain.messages import ContainerSpec, Workload
from eru.domain.resources import Allocation, ResourceRequest
from eru.errors import InvalidInput
from eru.nodeagent.engine import container_labels
from eru.nodeagent.load import EXIT_AFTER_LABEL, LOAD_LABEL
from eru_node_agent.runtime.base import ContainerMissing
from eru_node_agent.runtime.sim import SimRuntime

MiB = 1024**2


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def spec(cid: str, allocation: Allocation, **labels: str) -> ContainerSpec:
    workload = Workload(
        name="w",
        image="sim",
        resources=ResourceRequest(cpu_request=0.5, memory_request=64 * MiB),
        labels=labels,
    )
    return ContainerSpec(container_id=cid, deploy_id="d", workload=workload, allocation=allocation)


async def run(runtime: SimRuntime, container: ContainerSpec) -> None:
    cores = [str(i) for i in range(4)]
    await runtime.create(container, container_labels(container, runtime.node), cores)
    await runtime.start(container.container_id)


async def test_step_load_follows_the_clock_and_limits_apply() -> None:
    clock = Clock()
    runtime = SimRuntime("n1", cpu_cores=4, clock=clock)
    load = {
        "kind": "step",
        "steps": [{"at": 0, "cpu": 0.2, "memory": "32MiB"}, {"at": 10, "cpu": 3.0, "memory": "1GiB"}],
    }
    quota = spec("q", Allocation(cpu_limit=1.0, memory=256 * MiB), **{LOAD_LABEL: json.dumps(load)})
    await run(runtime, quota)
    early = (await runtime.usage(["q"], 5.0)).containers["q"]
    assert (early.cpu_used, early.memory_used, early.throttled_periods) == (0.2, 32 * MiB, 0)
    clock.now += 10
    late = (await runtime.usage(["q"], 5.0)).containers["q"]
    assert late.cpu_used == 1.0  # CFS quota of 1 core
    assert late.memory_used == 256 * MiB  # hard limit
    assert late.throttled_periods == 50
    await runtime.update("q", Allocation(cpu_limit=2.0, memory=2048 * MiB), [str(i) for i in range(4)])
    assert (await runtime.usage(["q"], 5.0)).containers["q"].cpu_used == 2.0


async def test_pause_stops_cpu_keeps_memory_and_exit_after_ends_a_container() -> None:
    clock = Clock()
    runtime = SimRuntime("n1", clock=clock)
    await run(runtime, spec("a", Allocation(cpu_map={"0": 100})))
    await runtime.pause("a")
    paused = (await runtime.usage(["a"], 1.0)).containers["a"]
    assert (paused.cpu_used, paused.memory_used) == (0.0, 64 * MiB)
    await runtime.unpause("a")
    assert (await runtime.usage(["a"], 1.0)).containers["a"].cpu_used == 0.5
    await run(runtime, spec("b", Allocation(memory=MiB), **{EXIT_AFTER_LABEL: "2"}))
    assert (await runtime.inspect("b")).state == "running"  # type: ignore[union-attr]
    clock.now += 2
    assert (await runtime.inspect("b")).state == "exited"  # type: ignore[union-attr]
    await runtime.remove("b")
    assert await runtime.inspect("b") is None
    with pytest.raises(ContainerMissing):
        await runtime.pause("b")


async def test_same_seed_same_usage_other_seed_other_usage() -> None:
    noisy = json.dumps({"kind": "noisy", "cpu": 1.0, "cpu_noise": 0.5, "memory": "100MiB", "memory_noise": "10MiB"})

    async def series(seed: int) -> list[tuple[float, int]]:
        clock = Clock()
        runtime = SimRuntime("n1", seed=seed, clock=clock)
        await run(runtime, spec("c", Allocation(memory=512 * MiB), **{LOAD_LABEL: noisy}))
        values = []
        for _ in range(10):
            clock.now += 1
            usage = (await runtime.usage(["c"], 1.0)).containers["c"]
            values.append((usage.cpu_used, usage.memory_used))
        return values

    assert await series(7) == await series(7)
    assert await series(7) != await series(8)


async def test_an_overloaded_sim_node_shares_its_cores_and_reports_node_totals() -> None:
    runtime = SimRuntime("n1", cpu_cores=2, clock=Clock())
    busy = json.dumps({"kind": "constant", "cpu": 2, "memory": "10MiB"})
    await run(runtime, spec("a", Allocation(), **{LOAD_LABEL: busy}))
    await run(runtime, spec("b", Allocation(), **{LOAD_LABEL: busy}))
    usage = await runtime.usage(["a", "b"], 1.0)
    assert usage.cpu_used == pytest.approx(2.0)
    assert usage.containers["a"].cpu_used == pytest.approx(1.0)
    assert usage.memory_used == 20 * MiB
    assert usage.cpu_capacity == 2.0


async def test_bad_simulation_labels_are_per_container_input_errors() -> None:
    runtime = SimRuntime("n1")
    with pytest.raises(InvalidInput) as error:
        await run(runtime, spec("x", Allocation(), **{LOAD_LABEL: '{"kind": "step", "steps": []}'}))
    assert error.value.field.startswith("workload.labels.eru.sim.load")
    assert await runtime.inspect("x") is None
