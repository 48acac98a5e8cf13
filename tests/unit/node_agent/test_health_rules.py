"""The health check's rules (docs/node-agent.md "Health and node TTL"): the engine's Healthcheck eru asks for, the
health read from a Docker listing, the sim runtime's model, and the sim runtime's containers over its clock."""

from __future__ import annotations

import pytest

from eru.domain.messages import ContainerSpec, Workload
from eru.domain.resources import Allocation
from eru.nodeagent.health import docker_healthcheck, listed_health, modelled_health
from eru.nodeagent.load import UNHEALTHY_LABEL
from eru_node_agent.runtime.sim import SimRuntime


def test_the_engines_healthcheck_runs_the_command_every_interval_with_the_retries() -> None:
    workload = Workload(
        name="w", image="i", health_command=["wget", "-q", "http://x/"], health_interval_seconds=2.5, health_retries=4
    )
    assert docker_healthcheck(workload) == {
        "Test": ["CMD", "wget", "-q", "http://x/"],
        "Interval": 2_500_000_000,
        "Timeout": 2_500_000_000,
        "Retries": 4,
        "StartPeriod": 0,
    }
    assert docker_healthcheck(Workload(name="w", image="i")) is None


@pytest.mark.parametrize(
    ("status", "health"),
    [
        ("Up 3 seconds (healthy)", "healthy"),
        ("Up 9 seconds (unhealthy)", "unhealthy"),
        ("Up 1 second (health: starting)", "starting"),
        ("Up 2 minutes", None),
        ("Exited (1) 3 seconds ago", None),
    ],
)
def test_the_health_in_a_docker_listing(status: str, health: str | None) -> None:
    assert listed_health(status) == health


@pytest.mark.parametrize(
    ("seconds", "failing", "health"),
    [
        (0.0, False, "starting"),
        (4.9, False, "starting"),
        (5.0, False, "healthy"),
        (60.0, False, "healthy"),
        (5.0, True, "starting"),  # 1 failure of 3
        (14.9, True, "starting"),  # 2 failures of 3
        (15.0, True, "unhealthy"),  # the 3rd failure in a row: interval 5 s × 3 retries
    ],
)
def test_the_modelled_health_every_5s_with_3_retries(seconds: float, failing: bool, health: str) -> None:
    assert modelled_health(seconds, 5.0, 3, failing) == health


async def test_a_sim_container_reports_its_modelled_health_over_the_clock() -> None:
    now = [100.0]
    runtime = SimRuntime("n1", clock=lambda: now[0])
    allocation = Allocation(cpu_map={"0": 100}, memory=1 << 20)
    check = {"health_command": ["check"], "health_interval_seconds": 2.0, "health_retries": 2}
    for cid, labels in (("sick", {UNHEALTHY_LABEL: "true"}), ("well", {}), ("plain", None)):
        fields = check if labels is not None else {}
        workload = Workload(name=cid, image="sim", labels=labels or {}, **fields)
        spec = ContainerSpec(container_id=cid, deploy_id="d", workload=workload, allocation=allocation)
        await runtime.create(spec, {}, [str(i) for i in range(16)])
        await runtime.start(cid)

    async def health() -> dict[str, str | None]:
        return {c.name.removeprefix("eru-"): c.health for c in await runtime.list()}

    assert await health() == {"sick": "starting", "well": "starting", "plain": None}
    now[0] += 2.0
    assert await health() == {"sick": "starting", "well": "healthy", "plain": None}
    now[0] += 2.0
    assert await health() == {"sick": "unhealthy", "well": "healthy", "plain": None}
    await runtime.stop("sick", 1.0)
    assert (await health())["sick"] is None  # not running: no health
