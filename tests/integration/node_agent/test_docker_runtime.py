"""The node agent against a real Docker engine: a container gets exactly its plan, updates happen in place, replace
works and rolls back, metrics of a busy container report about one core."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Window:
    """`count` consecutive samples of one container and the engine's own count around them.

    Sample i reports the cores used between the agent's engine readings r(i-1) and r(i); its `time` is stamped after
    r(i), and r(i+1) is taken after sample i is published. The engine's counter is read at `start`, before
    r(first - 1) (the sample after the first one stamped later than `start`), and at `end`, after r(last), so the
    samples' CPU seconds lie inside that window: never more than the engine counted, and less by at most what the
    container could use in the margins."""

    samples: list[ContainerMetrics]
    reported_seconds: float  # each sample's cores × the time since the previous sample
    covered_seconds: float  # from the sample before the first to the last
    engine_seconds: float  # the engine's CPU seconds from `start` to `end`
    engine_cores: float  # the same as an average over that time
    margin_seconds: float  # start → the sample before the first, the last → end, plus one interval of slack

    @property
    def cores(self) -> float:
        """What the samples say the container used on average, weighted by time."""
        return self.reported_seconds / self.covered_seconds

    def __str__(self) -> str:
        return (
            f"{self.reported_seconds:.3f} CPU s reported over {self.covered_seconds:.2f} s, the engine counted "
            f"{self.engine_seconds:.3f} ({self.engine_cores:.3f} cores), margins {self.margin_seconds:.2f} s"
        )


async def measured_window(
    samples: Collector, docker: aiodocker.Docker, container_id: str, count: int = 5, interval: float = 1.0
) -> Window:
    """`count` consecutive samples of the container and the engine's CPU seconds around them (see `Window`)."""
    await samples.wait_for(lambda s: usage_of(s, container_id) is not None, timeout=30)
    start = await cpu_seconds(docker, container_id)
    started_wall = time.time()  # after the engine's reading: a sample stamped later was read later

    def timed() -> list[tuple[float, ContainerMetrics | None]]:
        return [(s.time, usage_of(s, container_id)) for s in samples.models()]

    def window() -> list[tuple[float, ContainerMetrics]] | None:
        found = timed()
        # the first sample stamped after `start` was read; the next one is the window's "previous" sample
        after = next((i for i, (at, _) in enumerate(found) if at >= started_wall), None)
        picked = [] if after is None else found[after + 1 : after + 2 + count]
        if len(picked) < count + 1:
            return None
        chosen = [(at, usage) for at, usage in picked if usage is not None]
        return chosen if len(chosen) == len(picked) else None

    await samples.wait_for(lambda _: window() is not None, timeout=90)
    end = await cpu_seconds(docker, container_id)
    ended_wall = time.time()
    chosen = window()
    assert chosen is not None, timed()
    previous_at, last_at = chosen[0][0], chosen[-1][0]
    reported = sum(usage.cpu_used * (at - before) for (before, _), (at, usage) in itertools.pairwise(chosen))
    return Window(
        samples=[usage for _, usage in chosen[1:]],
        reported_seconds=reported,
        covered_seconds=last_at - previous_at,
        engine_seconds=end[1] - start[1],
        engine_cores=(end[1] - start[1]) / (end[0] - start[0]),
        margin_seconds=(previous_at - started_wall) + (ended_wall - last_at) + interval,
    )


STAMP_JITTER_SECONDS = 0.5  # a sample's time is stamped after its engine reading; under load up to this later


def assert_within(window: Window, cap_cores: float) -> None:
    """The samples' CPU seconds lie inside the engine's count: never more, and less only by what `cap_cores` could
    use in the margins. The slack: 5 % for the counters' own rounding, and the cores of the time between an engine
    reading and its sample's stamp (each sample's seconds are measured between stamps, not readings)."""
    slack = 0.05 * window.covered_seconds + cap_cores * STAMP_JITTER_SECONDS
    assert window.reported_seconds <= window.engine_seconds + slack, str(window)
    assert window.engine_seconds - window.reported_seconds <= cap_cores * window.margin_seconds + slack, str(window)


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
        measured = await measured_window(samples, docker, busy.container_id)
        pinned = measured.samples
        print(f"\npinned yes loop: reported {[round(c.cpu_used, 3) for c in pinned]}; {measured}")
        # About one core on an idle machine; on a shared one what it really got, never more than its one core.
        assert all(c.cpu_used <= 1.1 for c in pinned), pinned
        # Agreement with docker's own count over the same time is the real check. Compared as CPU seconds in a window
        # that contains the samples' span: a mean of per-sample rates against a rate over a shifted window differed
        # by more than 0.2 core under load (samples 0.03–0.36 core a second apart, run a2), with nothing misreported.
        assert_within(measured, cap_cores=1.0)
        # The loop really ran (not 0 ≈ 0). How much it got depends on the machine's load: a quiet 2-core machine gives
        # it ≈ 1 core, one at load 16 gave it 0.11.
        assert measured.cores >= 0.05
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
        capped_window = await measured_window(samples, docker, capped.container_id)
        quota = capped_window.samples
        print(
            f"quota 0.5 loop: reported {[(round(c.cpu_used, 3), c.throttled_periods) for c in quota]}, {capped_window}"
        )
        assert all(c.cpu_used <= 0.6 for c in quota), quota
        assert_within(capped_window, cap_cores=0.5)
        truth = capped_window.engine_cores
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
