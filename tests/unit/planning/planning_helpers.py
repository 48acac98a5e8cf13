"""Small builders shared by the planning tests."""

from __future__ import annotations

from collections.abc import Mapping

from eru.planning import NodeResources, NormalizedRequest, PlanningConfig, normalize_request

GIB = 1 << 30
MIB = 1 << 20


def node_with_free(
    free: Mapping[int, int], *, name: str = "n", memory: int = 64 * GIB, base: int = 100
) -> NodeResources:
    """A node whose cores have exactly `free` pieces left: cores of ≤ base free are registered at base and partly
    used; larger amounts are registered as oversold cores with nothing used."""
    cpu_map = {str(core): max(base, pieces) for core, pieces in free.items()}
    used = {str(core): base - pieces for core, pieces in free.items() if pieces < base}
    return NodeResources(name, cpu_map, memory, used_cpu_map=used)


def bind(cpu: float | str, memory: int = 0, config: PlanningConfig | None = None) -> NormalizedRequest:
    """A cpu_bind request of `cpu` cores and `memory` bytes."""
    return normalize_request(
        {"cpu_bind": True, "cpu_request": cpu, "memory_request": memory}, config or PlanningConfig()
    )
