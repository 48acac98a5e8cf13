"""The sizing options of `eru up` (docs/replicas.md): replica counts per service and the size of each sim node.

Pure parsing, so `eru up` refuses a bad value with one line naming the option before anything starts:

    --replicas allocator=3 --replicas node-agent=2 --sim-node-cpus 32 --sim-node-memory 64GiB
"""

from __future__ import annotations

from collections.abc import Sequence

from eru.errors import InvalidInput
from eru.units import parse_bytes

# The services `eru up` runs (eru.stack.SERVICES); `node-agent` replicas split the sim nodes between processes.
REPLICATED = ("allocator", "distributor", "eviction", "node-agent")
MAX_REPLICAS = 32
MAX_SIM_NODE_CPUS = 4096
MIN_SIM_NODE_MEMORY = 64 * 1024**2
MAX_READY_SECONDS = 86_400.0


def parse_replicas(values: Sequence[str]) -> dict[str, int]:
    """`["allocator=3", "eviction=2"]` → `{"allocator": 3, "eviction": 2}`; a service named twice takes the last.

    >>> parse_replicas(["allocator=3"])
    {'allocator': 3}
    """
    counts: dict[str, int] = {}
    for value in values:
        service, sep, number = value.partition("=")
        service = service.strip()
        if not sep:
            raise InvalidInput("--replicas", f"{value!r} is not SERVICE=N (e.g. allocator=3)")
        if service not in REPLICATED:
            raise InvalidInput(
                "--replicas", f"{value!r}: unknown service {service!r} (services: {', '.join(REPLICATED)})"
            )
        try:
            count = int(number.strip())
        except ValueError:
            raise InvalidInput("--replicas", f"{value!r}: {number.strip()!r} is not a whole number") from None
        if not 1 <= count <= MAX_REPLICAS:
            raise InvalidInput("--replicas", f"{value!r}: the count must be between 1 and {MAX_REPLICAS}")
        counts[service] = count
    return counts


def parse_sim_node_cpus(value: int | None) -> int | None:
    """Cores of each sim node (None: the agent's default)."""
    if value is not None and not 1 <= value <= MAX_SIM_NODE_CPUS:
        raise InvalidInput("--sim-node-cpus", f"{value} cores: must be between 1 and {MAX_SIM_NODE_CPUS}")
    return value


def parse_sim_node_memory(value: str | None) -> int | None:
    """Memory of each sim node in bytes, from a byte string such as `64GiB` (None: the agent's default)."""
    if value is None:
        return None
    memory = parse_bytes(value, "--sim-node-memory")  # its errors name the option too
    if memory < MIN_SIM_NODE_MEMORY:
        raise InvalidInput("--sim-node-memory", f"{value!r} is below the least of 64MiB")
    return memory


def parse_ready_timeout(value: float) -> float:
    """Seconds `eru up` gives every process to be ready: more than 0, at most a day."""
    if not 0 < value <= MAX_READY_SECONDS:
        raise InvalidInput("--ready-timeout", f"{value:g} s: must be more than 0 and at most {MAX_READY_SECONDS:g}")
    return value
