"""A node's capacity and usage from the kernel's text files (docs/node-agent.md): pure functions over the files'
contents.

The agent reads `/sys/devices/system/cpu/online`, `/proc/meminfo`, `/sys/devices/system/node/node*/{cpulist,meminfo}`
and `/proc/stat`; everything here only parses and computes, so it is tested with literal file contents.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from eru.errors import InvalidInput
from eru.nodeagent.engine import parse_cpuset, sorted_cores

_MEMINFO_LINE = re.compile(r"^(?:Node \d+ )?(\w+):\s+(\d+)(?:\s+kB)?\s*$")


def parse_meminfo(text: str) -> dict[str, int]:
    """`/proc/meminfo` (or a NUMA node's `meminfo`) as {field: bytes} (`kB` values converted)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        match = _MEMINFO_LINE.match(line.strip())
        if match:
            scale = 1024 if line.rstrip().endswith("kB") else 1
            values[match.group(1)] = int(match.group(2)) * scale
    return values


@dataclass(frozen=True)
class NodeCapacity:
    """What a node agent registers: cores → pieces, memory bytes, NUMA layout (empty when there is none)."""

    cpu_map: dict[str, int]
    memory: int
    numa: dict[str, str] = field(default_factory=dict)
    numa_memory: dict[str, int] = field(default_factory=dict)

    @property
    def cores(self) -> list[str]:
        """The node's core ids in order."""
        return sorted_cores(self.cpu_map)


def node_capacity(
    *,
    cores: Sequence[str],
    mem_total: int,
    share_base: int,
    memory_fraction: float,
    numa_cpulists: Mapping[str, str] | None = None,
    numa_mem_totals: Mapping[str, int] | None = None,
    cpu_cores: int | None = None,
    memory: int | None = None,
) -> NodeCapacity:
    """Capacity: every core at `share_base` pieces, `memory_fraction` of MemTotal, the NUMA layout when there is more
    than one NUMA node. `cpu_cores` keeps only the first n cores; `memory` replaces the computed memory (NUMA memory
    is then scaled to sum to it)."""
    if share_base <= 0:
        raise InvalidInput("share_base", f"must be positive, got {share_base}")
    if not 0 < memory_fraction <= 1:
        raise InvalidInput("memory_fraction", f"must be in (0, 1], got {memory_fraction}")
    ordered = sorted_cores(cores)
    if not ordered:
        raise InvalidInput("cores", "the node reports no online core")
    if cpu_cores is not None:
        if cpu_cores <= 0:
            raise InvalidInput("cpu_cores", f"must be positive, got {cpu_cores}")
        # An operator may register more cores than the engine sees (overselling by configuration).
        ordered = [str(i) for i in range(cpu_cores)] if cpu_cores > len(ordered) else ordered[:cpu_cores]
    total_memory = memory if memory is not None else int(mem_total * memory_fraction)
    if total_memory <= 0:
        raise InvalidInput("memory", f"must be positive, got {total_memory}")
    numa: dict[str, str] = {}
    numa_memory: dict[str, int] = {}
    if numa_cpulists and len(numa_cpulists) > 1:
        for numa_id, cpulist in numa_cpulists.items():
            for core in parse_cpuset(cpulist):
                if core in ordered:
                    numa[core] = numa_id
        used_numa = sorted(set(numa.values()), key=lambda n: (0, int(n)) if n.isdigit() else (1, n))
        raw = {n: (numa_mem_totals or {}).get(n, 0) for n in used_numa}
        raw_total = sum(raw.values())
        if raw_total > 0 and len(used_numa) > 1:
            numa_memory = {n: total_memory * amount // raw_total for n, amount in raw.items()}
        else:
            numa = {}
    return NodeCapacity(
        cpu_map={core: share_base for core in ordered}, memory=total_memory, numa=numa, numa_memory=numa_memory
    )


@dataclass(frozen=True)
class CpuTimes:
    """The aggregate `cpu` line of `/proc/stat`, in jiffies: busy and total."""

    busy: int
    total: int


def parse_proc_stat(text: str) -> CpuTimes:
    """Busy and total jiffies of all CPUs from `/proc/stat` (idle and iowait are not busy)."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            values = [int(v) for v in fields[1:]]
            idle = values[3] + (values[4] if len(values) > 4 else 0)
            # guest time is already counted in user/nice
            total = sum(values[:8]) if len(values) >= 8 else sum(values)
            return CpuTimes(busy=total - idle, total=total)
    raise InvalidInput("/proc/stat", "no aggregate 'cpu' line")


def cores_busy_between(before: CpuTimes, after: CpuTimes, online_cpus: int) -> float:
    """Cores in use on the node between two `/proc/stat` readings (0 when no time passed)."""
    elapsed = after.total - before.total
    if elapsed <= 0:
        return 0.0
    busy = max(0, after.busy - before.busy)
    return busy / elapsed * online_cpus


def memory_used(meminfo: Mapping[str, int]) -> int:
    """Bytes in use: MemTotal − MemAvailable (MemFree + Buffers + Cached on kernels without MemAvailable)."""
    total = meminfo.get("MemTotal", 0)
    available = meminfo.get("MemAvailable")
    if available is None:
        available = meminfo.get("MemFree", 0) + meminfo.get("Buffers", 0) + meminfo.get("Cached", 0)
    return max(0, total - available)
