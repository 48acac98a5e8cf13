"""The `docker` runtime: aiodocker against a real engine (Engine API 1.41+).

aiodocker has no container update call, so updates (and a few other calls) go through its low-level `_query_json`.
The engine is never asked to pull: an image that is not on the engine is a per-container failure naming it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiodocker
import aiohttp
from aiodocker.exceptions import DockerError

from eru.domain.messages import ContainerSpec
from eru.domain.resources import Allocation
from eru.nodeagent.capacity import (
    CpuTimes,
    NodeCapacity,
    cores_busy_between,
    memory_used,
    node_capacity,
    parse_meminfo,
    parse_proc_stat,
)
from eru.nodeagent.engine import (
    L_CONTAINER,
    L_MANAGED,
    L_NODE,
    engine_name,
    engine_resources,
    named_by_eru,
    parse_cpuset,
    stray_engine_id,
    suppressed_resources,
)
from eru.nodeagent.health import docker_healthcheck, listed_health
from eru.nodeagent.metrics import CpuCounters, cpu_cores_between, cpu_counters, memory_in_use, throttling_between
from eru_node_agent.runtime import docker_attach
from eru_node_agent.runtime.base import (
    AppliedResources,
    ContainerMissing,
    ContainerUsage,
    EngineUnavailable,
    NodeUsage,
    Output,
    RuntimeContainer,
    RuntimeFailure,
)

UNREACHABLE = 900  # aiodocker's status for "cannot connect"
JSON_HEADERS = {"Content-Type": "application/json"}
EXITED = re.compile(r"^Exited \((-?\d+)\)")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _exit_code(status: str) -> int | None:
    """The exit code in a listing's status text (`Exited (3) 2 seconds ago` → 3)."""
    match = EXITED.match(status)
    return int(match.group(1)) if match else None


class DockerRuntime:
    """Containers on a Docker engine; node usage from the host's /proc (the agent runs on its node)."""

    kind = "docker"

    def __init__(
        self,
        *,
        url: str | None = None,
        share_base: int = 100,
        memory_fraction: float = 0.8,
        cpu_cores: int | None = None,
        memory: int | None = None,
        proc: Path = Path("/proc"),
        sys: Path = Path("/sys"),
        request_timeout_seconds: float = 60.0,
        read_file: Callable[[Path], str | None] = _read,
        node: str | None = None,
    ) -> None:
        self._url = url
        self._docker: aiodocker.Docker | None = None
        self._share_base = share_base
        self._memory_fraction = memory_fraction
        self._cpu_cores = cpu_cores
        self._memory = memory
        self._proc = proc
        self._sys = sys
        self._timeout = request_timeout_seconds
        self._read = read_file
        self.node = node  # the node it serves: a stray is removed only when labelled for it
        self._counters: dict[str, CpuCounters] = {}
        self._host_times: CpuTimes | None = None

    async def _client(self) -> aiodocker.Docker:
        if self._docker is None:
            try:
                self._docker = aiodocker.Docker(url=self._url)
            except (OSError, ValueError, DockerError) as error:
                raise EngineUnavailable(f"no Docker engine: {error}") from None
        return self._docker

    async def _call(
        self, path: str, method: str = "GET", *, params: Mapping[str, Any] | None = None, body: Any = None
    ) -> Any:
        docker = await self._client()
        try:
            return await docker._query_json(
                path,
                method,
                params=dict(params or {}) or None,
                data=body,
                headers=JSON_HEADERS,
                timeout=aiohttp.ClientTimeout(total=self._timeout),
            )
        except DockerError as error:
            if error.status == UNREACHABLE:
                raise EngineUnavailable(f"Docker engine unreachable: {error.message}") from None
            raise
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            raise EngineUnavailable(f"Docker engine unreachable: {type(error).__name__}: {error}") from None

    async def capacity(self) -> tuple[NodeCapacity, dict[str, str]]:
        """Cores online (from /sys, else the engine's NCPU), MemTotal (from /proc, else the engine), NUMA from /sys."""
        info = await self._call("info")
        online = self._read(self._sys / "devices/system/cpu/online")
        cores = sorted(parse_cpuset(online), key=int) if online else [str(i) for i in range(int(info["NCPU"]))]
        meminfo = parse_meminfo(self._read(self._proc / "meminfo") or "")
        mem_total = meminfo.get("MemTotal") or int(info["MemTotal"])
        numa_cpulists: dict[str, str] = {}
        numa_memory: dict[str, int] = {}
        node_dir = self._sys / "devices/system/node"
        for entry in sorted(node_dir.glob("node[0-9]*")) if node_dir.is_dir() else []:
            numa_id = entry.name.removeprefix("node")
            cpulist = self._read(entry / "cpulist")
            if cpulist is not None:
                numa_cpulists[numa_id] = cpulist
                numa_memory[numa_id] = parse_meminfo(self._read(entry / "meminfo") or "").get("MemTotal", 0)
        capacity = node_capacity(
            cores=cores,
            mem_total=mem_total,
            share_base=self._share_base,
            memory_fraction=self._memory_fraction,
            numa_cpulists=numa_cpulists,
            numa_mem_totals=numa_memory,
            cpu_cores=self._cpu_cores,
            memory=self._memory,
        )
        stat_text = self._read(self._proc / "stat")
        if stat_text:  # the first metrics sample then already has a baseline
            self._host_times = parse_proc_stat(stat_text)
        labels = {
            "engine": f"docker {info.get('ServerVersion', '?')}",
            "cgroup": f"v{info.get('CgroupVersion', '1')}",
            "kernel": str(info.get("KernelVersion", "")),
        }
        return capacity, labels

    async def create(self, spec: ContainerSpec, labels: Mapping[str, str], node_cores: Sequence[str]) -> str:
        """Create the container with its exact allocation; an existing container of the same id is reused."""
        workload = spec.workload
        resources = engine_resources(spec.allocation, node_cores)
        host_config = {
            **resources.host_config(),
            "NetworkMode": workload.network_mode,
            "RestartPolicy": {"Name": workload.restart_policy},
        }
        config: dict[str, Any] = {
            "Image": workload.image,
            "Labels": dict(labels),
            "Env": [f"{key}={value}" for key, value in sorted(workload.env.items())],
            "HostConfig": host_config,
        }
        if workload.command:
            config["Cmd"] = list(workload.command)
        healthcheck = docker_healthcheck(workload)
        if healthcheck is not None:  # the engine runs the check (docs/node-agent.md "Health and node TTL")
            config["Healthcheck"] = healthcheck
        name = engine_name(spec.container_id)
        try:
            created = await self._call("containers/create", "POST", params={"name": name}, body=config)
        except DockerError as error:
            if error.status == 404:
                raise RuntimeFailure(
                    f"image {workload.image!r} is not on the engine (the agent never pulls: import or load it first)"
                ) from None
            if error.status == 409:
                existing = await self.inspect(spec.container_id)
                if existing is not None:
                    return existing.engine_id
            raise RuntimeFailure(f"the engine refused to create the container: {error.message}") from None
        return str(created["Id"])

    async def _container_call(self, container_id: str, action: str, *, params: Mapping[str, Any] | None = None) -> Any:
        try:
            return await self._call(f"containers/{engine_name(container_id)}/{action}", "POST", params=params)
        except DockerError as error:
            if error.status == 404:
                raise ContainerMissing(f"container {container_id} does not exist on this node") from None
            if error.status == 304:  # already in the wanted state
                return None
            raise RuntimeFailure(f"{action} failed: {error.message}") from None

    async def start(self, container_id: str) -> None:
        """Start (a running container stays as it is)."""
        await self._container_call(container_id, "start")

    async def stop(self, container_id: str, timeout_seconds: float) -> None:
        """Stop with SIGTERM, SIGKILL after `timeout_seconds`."""
        await self._container_call(container_id, "stop", params={"t": max(0, round(timeout_seconds))})

    async def remove(self, container_id: str) -> None:
        """Kill and remove; a missing container is already removed. A stray's id (`stray-<engine id>`, what the
        inventory reports eru's labels on a container eru did not name by) removes that container, if it carries
        eru's labels (for this node, when the runtime knows its node): nothing else is ever touched."""
        target: str | None = engine_name(container_id)
        short = stray_engine_id(container_id)
        if short is not None:
            target = await self._stray(short)
            if target is None:
                return
        try:
            await self._call(f"containers/{target}", "DELETE", params={"force": "true"})
        except DockerError as error:
            if error.status != 404:
                raise RuntimeFailure(f"remove failed: {error.message}") from None
        self._counters.pop(container_id, None)

    async def _stray(self, short_id: str) -> str | None:
        """The engine id of the stray `short_id`: a container with eru's labels (for this node) not named by eru."""
        try:
            data: dict[str, Any] = await self._call(f"containers/{short_id}/json")
        except DockerError as error:
            if error.status == 404:
                return None
            raise RuntimeFailure(f"inspect failed: {error.message}") from None
        labels = (data.get("Config") or {}).get("Labels") or {}
        name = str(data.get("Name", "")).lstrip("/")
        if labels.get(L_MANAGED) != "true" or named_by_eru(name, labels.get(L_CONTAINER, "")):
            return None
        if self.node is not None and labels.get(L_NODE) != self.node:
            return None
        return str(data["Id"])

    async def pause(self, container_id: str) -> None:
        """Freeze (a paused container stays paused)."""
        current = await self._require(container_id)
        if current.state != "paused":
            await self._container_call(container_id, "pause")

    async def unpause(self, container_id: str) -> None:
        """Thaw (a running container stays as it is)."""
        current = await self._require(container_id)
        if current.state == "paused":
            await self._container_call(container_id, "unpause")

    async def update(
        self, container_id: str, allocation: Allocation, node_cores: Sequence[str], *, cpu_quota: float | None = None
    ) -> None:
        """Change cpuset, shares, quota and memory in place (Engine API `POST /containers/{id}/update`); a squeeze
        keeps the allocation's cpuset and shares and only sets the quota."""
        body = suppressed_resources(allocation, node_cores, cpu_quota).update_body()
        try:
            await self._call(f"containers/{engine_name(container_id)}/update", "POST", body=body)
        except DockerError as error:
            if error.status == 404:
                raise ContainerMissing(f"container {container_id} does not exist on this node") from None
            raise RuntimeFailure(f"the engine refused the update: {error.message}") from None

    async def _require(self, container_id: str) -> RuntimeContainer:
        found = await self.inspect(container_id)
        if found is None:
            raise ContainerMissing(f"container {container_id} does not exist on this node")
        return found

    async def _inspected(self, container_id: str) -> dict[str, Any] | None:
        """The engine's inspect document of the container by eru id, or None when it does not exist."""
        try:
            data: dict[str, Any] = await self._call(f"containers/{engine_name(container_id)}/json")
        except DockerError as error:
            if error.status == 404:
                return None
            raise RuntimeFailure(f"inspect failed: {error.message}") from None
        return data

    async def inspect(self, container_id: str) -> RuntimeContainer | None:
        """The container by eru id, or None."""
        data = await self._inspected(container_id)
        if data is None:
            return None
        state = data.get("State") or {}
        return RuntimeContainer(
            engine_id=data["Id"],
            name=str(data.get("Name", "")).lstrip("/"),
            labels=(data.get("Config") or {}).get("Labels") or {},
            state=str(state.get("Status", "unknown")),
            started_at=str(state.get("StartedAt", "")),
            exit_code=state.get("ExitCode"),
        )

    async def list(self) -> list[RuntimeContainer]:
        """Every container on the engine, running or not."""
        rows = await self._call("containers/json", params={"all": "true"})
        return [
            RuntimeContainer(
                engine_id=row["Id"],
                name=(row.get("Names") or ["/"])[0].lstrip("/"),
                labels=row.get("Labels") or {},
                state=str(row.get("State", "unknown")),
                exit_code=_exit_code(str(row.get("Status", ""))),
                health=listed_health(str(row.get("Status", ""))),
            )
            for row in rows
        ]

    async def applied(self, container_id: str) -> AppliedResources | None:
        """The container's HostConfig resources as the engine reports them."""
        data = await self._inspected(container_id)
        if data is None:
            return None
        host = data.get("HostConfig") or {}
        return AppliedResources(
            cpuset=str(host.get("CpusetCpus") or ""),
            cpu_shares=int(host.get("CpuShares") or 0),
            cpu_quota=int(host.get("CpuQuota") or 0),
            memory=int(host.get("Memory") or 0),
        )

    async def health_check(self, container_id: str, command: Sequence[str], timeout_seconds: float) -> bool:
        """Run `command` in the container (exec); healthy when it exits 0 within the timeout."""
        name = engine_name(container_id)
        try:
            created = await self._call(
                f"containers/{name}/exec", "POST", body={"Cmd": list(command), "AttachStdout": False}
            )
            exec_id = created["Id"]
            await self._call(f"exec/{exec_id}/start", "POST", body={"Detach": True})
            deadline = time.monotonic() + timeout_seconds
            while time.monotonic() < deadline:
                state = await self._call(f"exec/{exec_id}/json")
                if not state.get("Running"):
                    return bool(state.get("ExitCode") == 0)
                await asyncio.sleep(0.1)
        except DockerError:
            return False
        return False

    async def usage(self, container_ids: Sequence[str], interval_seconds: float) -> NodeUsage:
        """Node CPU from /proc/stat deltas, memory from /proc/meminfo; containers from one-shot engine stats."""
        stat_text = self._read(self._proc / "stat")
        meminfo = parse_meminfo(self._read(self._proc / "meminfo") or "")
        online = max(1, len(parse_cpuset(self._read(self._sys / "devices/system/cpu/online") or "0")))
        node_cpu = 0.0
        if stat_text:
            times = parse_proc_stat(stat_text)
            if self._host_times is not None:
                node_cpu = cores_busy_between(self._host_times, times, online)
            self._host_times = times
        readings = await asyncio.gather(*(self._container_usage(cid) for cid in container_ids))
        containers = {cid: usage for cid, usage in zip(container_ids, readings, strict=True) if usage is not None}
        for gone in set(self._counters) - set(container_ids):
            del self._counters[gone]
        return NodeUsage(
            cpu_used=node_cpu,
            memory_used=memory_used(meminfo),
            memory_total=meminfo.get("MemTotal", 0),
            cpu_capacity=float(online),
            containers=containers,
        )

    async def _container_usage(self, container_id: str) -> ContainerUsage | None:
        try:
            stats = await self._call(
                f"containers/{engine_name(container_id)}/stats", params={"stream": "false", "one-shot": "true"}
            )
        except (DockerError, EngineUnavailable):
            return None
        if not isinstance(stats, Mapping) or not stats:
            # A container removed while it was being sampled: the one-shot stats come back empty (None, or a
            # document of zeros). It is left out of this sample; the rest of the node's sample goes out.
            self._counters.pop(container_id, None)
            return None
        counters = cpu_counters(stats)
        if counters is None:  # not running: no CPU, memory as the engine says
            self._counters.pop(container_id, None)
            return ContainerUsage(0.0, memory_in_use(stats))
        previous = self._counters.get(container_id)
        self._counters[container_id] = counters
        if previous is None:
            return None  # the first reading has nothing to compare with; a false 0 would look idle
        periods, seconds = throttling_between(previous, counters)
        return ContainerUsage(cpu_cores_between(previous, counters), memory_in_use(stats), periods, seconds)

    async def logs(self, container_id: str, output: Output, *, follow: bool, tail: int | None) -> int | None:
        """The container's stdout/stderr from the engine (eru_node_agent.runtime.docker_attach)."""
        return await docker_attach.logs(await self._client(), container_id, output, follow=follow, tail=tail)

    async def exec(self, container_id: str, command: Sequence[str], output: Output) -> int:
        """Run `command` in the container, attached (eru_node_agent.runtime.docker_attach)."""
        return await docker_attach.exec_in(await self._client(), container_id, command, output)

    async def close(self) -> None:
        """Close the engine connection."""
        if self._docker is not None:
            with contextlib.suppress(Exception):
                await self._docker.close()
            self._docker = None
