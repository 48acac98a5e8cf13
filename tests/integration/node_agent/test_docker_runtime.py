"""The node agent against a real Docker engine: a container gets exactly its plan, updates happen in place, replace
works and rolls back, metrics of a busy container report about one core."""

from __future__ import annotations

import statistics
import time
from collections.abc import AsyncIterator
from typing import Any

import aiodocker
import pytest
import pytest_asyncio
from agent_helpers import Collector, create, running_agent, send, workload

from eru.bus import new_id
from eru.domain.messages import ContainerEvent, ContainerMetrics, ContainerSpec, NodeCommand, NodeMetrics
from eru.domain.resources import Allocation, ResourceRequest
from eru.nodeagent.engine import engine_name, parse_cpuset
from eru_node_agent.runtime.docker import DockerRuntime

pytestmark = [pytest.mark.docker]
MiB = 1024**2


@pytest_asyncio.fixture
async def docker(docker_engine: str | None) -> AsyncIterator[aiodocker.Docker]:
    client = aiodocker.Docker(url=docker_engine)
    try:
        yield client
    finally:
        await client.close()


async def inspect(docker: aiodocker.Docker, container_id: str) -> dict[str, Any]:
    data: dict[str, Any] = await docker._query_json(f"containers/{engine_name(container_id)}/json")
    return data


async def read_in_container(docker: aiodocker.Docker, container_id: str, *paths: str) -> list[str]:
    """The contents of files inside the container, read with `cat` through docker exec."""
    container = await docker.containers.get(engine_name(container_id))
    values = []
    for path in paths:
        execution = await container.exec(["cat", path], stdout=True, stderr=True)
        output = b""
        async with execution.start(detach=False) as stream:
            while (message := await stream.read_out()) is not None:
                output += message.data
        values.append(output.decode().strip())
    return values


async def cgroup_limits(docker: aiodocker.Docker, container_id: str) -> dict[str, Any]:
    """cpuset, shares (v1) / weight (v2), quota, period, memory hard and soft limit as the container's cgroup says."""
    probe = await read_in_container(docker, container_id, "/sys/fs/cgroup/cpuset/cpuset.cpus")
    if probe[0] and "No such file" not in probe[0]:  # cgroup v1
        cpus, shares, quota, period, limit, soft = await read_in_container(
            docker,
            container_id,
            "/sys/fs/cgroup/cpuset/cpuset.cpus",
            "/sys/fs/cgroup/cpu/cpu.shares",
            "/sys/fs/cgroup/cpu/cpu.cfs_quota_us",
            "/sys/fs/cgroup/cpu/cpu.cfs_period_us",
            "/sys/fs/cgroup/memory/memory.limit_in_bytes",
            "/sys/fs/cgroup/memory/memory.soft_limit_in_bytes",
        )
        return {
            "cpus": parse_cpuset(cpus),
            "shares": int(shares),
            "quota": int(quota),
            "period": int(period),
            "memory": int(limit),
            "soft": int(soft),
        }
    cpus, weight, cpu_max, memory_max, memory_low = await read_in_container(  # cgroup v2
        docker,
        container_id,
        "/sys/fs/cgroup/cpuset.cpus.effective",
        "/sys/fs/cgroup/cpu.weight",
        "/sys/fs/cgroup/cpu.max",
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory.low",
    )
    quota, period = cpu_max.split()
    return {
        "cpus": parse_cpuset(cpus),
        "shares": 2 + (int(weight) - 1) * 262142 // 9999,  # docker's shares → weight mapping, inverted
        "quota": -1 if quota == "max" else int(quota),
        "period": int(period),
        "memory": -1 if memory_max == "max" else int(memory_max),
        "soft": int(memory_low),
    }


def events_of(collector: Collector, container_id: str) -> list[ContainerEvent]:
    return [e for e in collector.models() if e.container_id == container_id]


async def test_a_container_gets_exactly_its_plan_and_an_update_changes_it_in_place(
    js: Any, nc: Any, docker: aiodocker.Docker, busybox_image: str, docker_node: str
) -> None:
    node = docker_node
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    async with running_agent(js, DockerRuntime(), node):
        # CPU-prime 1.3 cores: whole core 0 + fragment core 1 with 30 pieces; hard memory 64 MiB.
        bound = create(
            node,
            workload(
                busybox_image,
                "sleep",
                "600",
                resources=ResourceRequest(cpu_bind=True, cpu_request=1.3, memory_request=64 * MiB),
                tenant="acme",
                priority_class="mid",
                priority=3,
                restart_policy="unless-stopped",
            ),
            Allocation(cpu_map={"0": 100, "1": 30}, memory=64 * MiB, cpu_bind=True),
        )
        # Memory-prime: quota = 0.5 × period, memory reservation only (memory_soft).
        soft = create(
            node,
            workload(busybox_image, "sleep", "600", resources=ResourceRequest(cpu_request=0.5, cpu_limit=0.5)),
            Allocation(memory=32 * MiB, cpu_limit=0.5, memory_soft=True),
        )
        await send(js, bound)
        await send(js, soft)
        for command in (bound, soft):
            started = await events.wait_for(lambda e, c=command: e.container_id == c.container_id)
            assert started.kind == "started", started.reason
            assert started.command_id == command.command_id

        info = await inspect(docker, bound.container_id)
        host = info["HostConfig"]
        assert parse_cpuset(host["CpusetCpus"]) == {"0", "1"}
        assert host["CpuShares"] == 1024 * 30 // 100
        assert host["CpuQuota"] == 0
        assert host["Memory"] == 64 * MiB
        assert host["NetworkMode"] == "none"
        assert host["RestartPolicy"]["Name"] == "unless-stopped"
        labels = info["Config"]["Labels"]
        assert labels["eru.node"] == node
        assert labels["eru.tenant"] == "acme"
        assert labels["eru.class"] == "mid"
        assert labels["eru.priority"] == "3"
        assert float(labels["eru.cpu_request"]) == 1.3
        cgroup = await cgroup_limits(docker, bound.container_id)
        assert cgroup["cpus"] == {"0", "1"}
        assert cgroup["shares"] == 307
        assert cgroup["quota"] == -1
        assert cgroup["memory"] == 64 * MiB

        soft_host = (await inspect(docker, soft.container_id))["HostConfig"]
        assert soft_host["CpuQuota"] == 50_000
        assert soft_host["CpuPeriod"] == 100_000
        assert soft_host["Memory"] == 0
        assert soft_host["MemoryReservation"] == 32 * MiB
        soft_cgroup = await cgroup_limits(docker, soft.container_id)
        assert soft_cgroup["quota"] == 50_000
        assert soft_cgroup["period"] == 100_000
        assert soft_cgroup["soft"] == 32 * MiB
        assert soft_cgroup["memory"] > 1024**4  # no hard limit

        # Realloc in place: only core 1, whole, and 128 MiB.
        before = await inspect(docker, bound.container_id)
        update = NodeCommand(
            command_id=new_id(),
            node=node,
            kind="update",
            container_id=bound.container_id,
            allocation=Allocation(cpu_map={"1": 100}, memory=128 * MiB, cpu_bind=True),
        )
        await send(js, update)
        updated = await events.wait_for(lambda e: e.command_id == update.command_id)
        assert updated.kind == "updated", updated.reason
        after = await inspect(docker, bound.container_id)
        assert after["Id"] == before["Id"]
        assert after["State"]["StartedAt"] == before["State"]["StartedAt"]
        assert after["State"]["Running"]
        assert after["RestartCount"] == before["RestartCount"]
        cgroup = await cgroup_limits(docker, bound.container_id)
        assert cgroup["cpus"] == {"1"}
        assert cgroup["shares"] == 1024
        assert cgroup["memory"] == 128 * MiB


async def test_replace_swaps_containers_and_rolls_back_when_the_new_one_exits_at_once(
    js: Any, nc: Any, docker: aiodocker.Docker, busybox_image: str, docker_node: str
) -> None:
    node = docker_node
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    allocation = Allocation(cpu_map={"1": 50}, memory=32 * MiB, cpu_bind=True)
    async with running_agent(js, DockerRuntime(), node, settle_seconds=1.0):
        old = create(node, workload(busybox_image, "sleep", "600"), allocation)
        await send(js, old)
        assert (await events.wait_for(lambda e: e.command_id == old.command_id)).kind == "started"

        new_id_ = f"n{new_id().replace('-', '')[-16:]}"
        # The replacement asks for other resources: replace keeps the old allocation anyway (docs/planning.md).
        replacement = ContainerSpec(
            container_id=new_id_,
            deploy_id="d2",
            workload=workload(busybox_image, "sleep", "600", health_command=["true"]),
            allocation=Allocation(cpu_map={"0": 100}, memory=8 * MiB, cpu_bind=True),
        )
        replace = NodeCommand(
            command_id=new_id(),
            node=node,
            kind="replace",
            container_id=old.container_id,
            replacement=replacement,
            health_timeout_seconds=10,
        )
        await send(js, replace)
        replaced = await events.wait_for(lambda e: e.command_id == replace.command_id, timeout=60)
        assert replaced.kind == "replaced", replaced.reason
        assert replaced.container_id == new_id_
        assert replaced.replaced_container_id == old.container_id
        assert replaced.allocation == allocation
        with pytest.raises(aiodocker.exceptions.DockerError):
            await inspect(docker, old.container_id)
        host = (await inspect(docker, new_id_))["HostConfig"]
        assert parse_cpuset(host["CpusetCpus"]) == {"1"}
        assert host["Memory"] == 32 * MiB

        crashing = ContainerSpec(
            container_id=f"x{new_id().replace('-', '')[-16:]}",
            deploy_id="d3",
            workload=workload(busybox_image, "sh", "-c", "exit 3"),
            allocation=allocation,
        )
        rollback = NodeCommand(
            command_id=new_id(), node=node, kind="replace", container_id=new_id_, replacement=crashing
        )
        await send(js, rollback)
        failed = await events.wait_for(lambda e: e.command_id == rollback.command_id, timeout=60)
        assert failed.kind == "failed"
        assert failed.container_id == crashing.container_id
        assert "rolled back" in failed.reason
        assert "code 3" in failed.reason
        survivor = await inspect(docker, new_id_)
        assert survivor["State"]["Status"] == "running"  # unpaused
        with pytest.raises(aiodocker.exceptions.DockerError):
            await inspect(docker, crashing.container_id)


async def cpu_seconds(docker: aiodocker.Docker, container_id: str) -> tuple[float, float]:
    """(monotonic time, the container's cumulative CPU seconds) straight from the engine: the reference."""
    stats = await docker._query_json(
        f"containers/{engine_name(container_id)}/stats", params={"stream": "false", "one-shot": "true"}
    )
    return time.monotonic(), stats["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9


def usage_of(sample: NodeMetrics, container_id: str) -> ContainerMetrics | None:
    return next((c for c in sample.containers if c.container_id == container_id), None)


async def measured_window(
    samples: Collector, docker: aiodocker.Docker, container_id: str, count: int = 5
) -> tuple[list[ContainerMetrics], float]:
    """`count` consecutive samples of the container, and the cores it really used over about the same time."""
    await samples.wait_for(lambda s: usage_of(s, container_id) is not None, timeout=30)
    first = len(samples.items)
    start = await cpu_seconds(docker, container_id)

    def window() -> list[ContainerMetrics]:
        found = (usage_of(s, container_id) for s in samples.models()[first:])
        return [c for c in found if c is not None]

    await samples.wait_for(lambda _: len(window()) >= count, timeout=60)
    end = await cpu_seconds(docker, container_id)
    return window()[:count], (end[1] - start[1]) / (end[0] - start[0])


async def test_metrics_of_a_busy_loop_pinned_to_one_core_report_about_one_core(
    js: Any, nc: Any, docker: aiodocker.Docker, busybox_image: str, docker_node: str
) -> None:
    node = docker_node
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    samples = await Collector(NodeMetrics).start(nc, f"eru.metrics.{node}")
    async with running_agent(js, DockerRuntime(), node, metrics_interval_seconds=1.0):
        busy = create(
            node,
            workload(busybox_image, "sh", "-c", "yes > /dev/null", priority_class="batch", tenant="t1"),
            Allocation(cpu_map={"1": 100}, memory=16 * MiB, cpu_bind=True),
        )
        await send(js, busy)
        assert (await events.wait_for(lambda e: e.command_id == busy.command_id)).kind == "started"
        pinned, truth = await measured_window(samples, docker, busy.container_id)
        reported = statistics.mean(c.cpu_used for c in pinned)
        print(f"\npinned yes loop: reported {[round(c.cpu_used, 3) for c in pinned]}, engine says {truth:.3f} cores")
        # About one core on an idle machine; on a shared one what it really got, never more than its one core.
        assert all(c.cpu_used <= 1.1 for c in pinned), pinned
        assert abs(reported - truth) <= 0.2, (reported, truth)
        # The loop really ran (not 0 ≈ 0). How much it got depends on the machine's load: a quiet 2-core machine gives
        # it ≈ 1 core, one at load 16 gave it 0.11; agreement with docker's own count above is the real check.
        assert reported >= 0.05
        assert (pinned[0].priority_class, pinned[0].tenant, pinned[0].cpu_request) == ("batch", "t1", 0.0)
        assert pinned[0].memory_used > 0
        node_sample = samples.models()[-1]
        assert node_sample.cpu_used >= 0.05
        assert node_sample.memory_total > node_sample.memory_used > 0
        remove = NodeCommand(command_id=new_id(), node=node, kind="remove", container_id=busy.container_id)
        await send(js, remove)
        assert (await events.wait_for(lambda e: e.command_id == remove.command_id)).kind == "removed"

        # Memory-prime with a CFS quota of half a core: capped there, and throttled.
        capped = create(
            node,
            workload(busybox_image, "sh", "-c", "yes > /dev/null", resources=ResourceRequest(cpu_limit=0.5)),
            Allocation(cpu_limit=0.5, memory=16 * MiB),
        )
        await send(js, capped)
        assert (await events.wait_for(lambda e: e.command_id == capped.command_id)).kind == "started"
        quota, truth = await measured_window(samples, docker, capped.container_id)
        print(f"quota 0.5 loop: reported {[(round(c.cpu_used, 3), c.throttled_periods) for c in quota]}, {truth:.3f}")
        assert all(c.cpu_used <= 0.6 for c in quota), quota
        assert abs(statistics.mean(c.cpu_used for c in quota) - truth) <= 0.15
        assert quota[0].cpu_limit == 0.5
        # CFS throttles only a loop that wants more than its quota: on a machine so busy that the loop got less than
        # 0.4 core in the window (load ≥ 5 on 2 cores), no period is throttled and there is nothing to count.
        if truth >= 0.4:
            assert sum(c.throttled_periods for c in quota) > 0
            assert sum(c.throttled_seconds for c in quota) > 0


async def test_a_missing_image_fails_that_container_only(
    js: Any, nc: Any, busybox_image: str, docker_node: str
) -> None:
    node = docker_node
    events = await Collector(ContainerEvent).start(nc, f"eru.container.{node}.*")
    async with running_agent(js, DockerRuntime(), node):
        missing = create(node, workload("eru-test/not-there:404", "sleep", "1"), Allocation(memory=16 * MiB))
        fine = create(node, workload(busybox_image, "sleep", "600"), Allocation(memory=16 * MiB))
        await send(js, missing)
        await send(js, fine)
        failed = await events.wait_for(lambda e: e.command_id == missing.command_id)
        assert failed.kind == "failed"
        assert "eru-test/not-there:404" in failed.reason
        assert failed.deploy_id == "d1"
        assert (await events.wait_for(lambda e: e.command_id == fine.command_id)).kind == "started"
        # The agent still serves that node: stop and start the healthy container.
        for kind, result in (("stop", "stopped"), ("start", "started")):
            command = NodeCommand(command_id=new_id(), node=node, kind=kind, container_id=fine.container_id)  # type: ignore[arg-type]
            await send(js, command)
            assert (await events.wait_for(lambda e, c=command: e.command_id == c.command_id)).kind == result
