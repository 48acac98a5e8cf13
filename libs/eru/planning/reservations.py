"""Per-node reservations for a tenant (docs/fairness-and-scoring.md): what a placement may not use.

A reservation holds `cpu` pieces and `memory` bytes of one node for one tenant. The tenant's containers on that
node use it first (per resource, min(held, reserved)); what is left unused is withheld from every other tenant. So a
request of tenant X sees each node minus Σ over the other tenants t of max(0, reserved_t − held_t).

`withhold` applies that to the planning core's snapshot: withheld memory is added to the node's used memory (and
taken from its NUMA nodes, last first), withheld CPU pieces are marked used on the cores with the highest names
first (numeric order), so the cores a request may take stay the low ones. Pure: the allocator records the withheld
amounts with the deploy decision (`"withheld"` in the `eru plan` problem) and replay applies the same function.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from eru.errors import InvalidInput
from eru.planning.resources import NodeResources


@dataclass(frozen=True, slots=True)
class Amount:
    """CPU pieces and memory bytes."""

    cpu: int = 0
    memory: int = 0

    def unused_by(self, held: Amount) -> Amount:
        """What of this reservation `held` does not use."""
        return Amount(max(self.cpu - held.cpu, 0), max(self.memory - held.memory, 0))

    def used_by(self, held: Amount) -> Amount:
        """What of this reservation `held` uses."""
        return Amount(min(self.cpu, held.cpu), min(self.memory, held.memory))

    def plus(self, other: Amount) -> Amount:
        """The sum."""
        return Amount(self.cpu + other.cpu, self.memory + other.memory)


Reservations = Mapping[str, Mapping[str, Amount]]
"""node → tenant → reserved amount."""
Held = Mapping[tuple[str, str], Amount]
"""(tenant, node) → what the tenant's live containers hold there (all its groups)."""


def withheld_for(tenant: str, reservations: Reservations, held: Held) -> dict[str, Amount]:
    """node → what `tenant` may not use there: the other tenants' unused reservations (nodes with none left out)."""
    result: dict[str, Amount] = {}
    for node, per_tenant in reservations.items():
        total = Amount()
        for owner, reserved in per_tenant.items():
            if owner != tenant:
                total = total.plus(reserved.unused_by(held.get((owner, node), Amount())))
        if total.cpu or total.memory:
            result[node] = total
    return result


def _core_order(core: str) -> tuple[int, int | str]:
    return (0, int(core)) if core.isdigit() else (1, core)


def withhold(nodes: list[NodeResources], withheld: Mapping[str, Amount]) -> list[NodeResources]:
    """The nodes as a tenant sees them: each node's withheld amounts marked used (see the module doc)."""
    result = []
    for node in nodes:
        amount = withheld.get(node.name)
        if amount is None:
            result.append(node)
            continue
        used_cpu = dict(node.used_cpu_map)
        left = amount.cpu
        for core in sorted(node.cpu_map, key=_core_order, reverse=True):
            if left <= 0:
                break
            take = min(max(node.cpu_map[core] - used_cpu.get(core, 0), 0), left)
            if take:
                used_cpu[core] = used_cpu.get(core, 0) + take
                left -= take
        memory = min(amount.memory, max(node.memory - node.used_memory, 0))
        used_numa = dict(node.used_numa_memory)
        numa_left = memory
        for numa in sorted(node.numa_memory, key=_core_order, reverse=True):
            take = min(max(node.numa_memory[numa] - used_numa.get(numa, 0), 0), numa_left)
            if take:
                used_numa[numa] = used_numa.get(numa, 0) + take
                numa_left -= take
        result.append(
            replace(node, used_cpu_map=used_cpu, used_memory=node.used_memory + memory, used_numa_memory=used_numa)
        )
    return result


def parse_withheld(raw: object, share_base: int, field: str = "withheld") -> dict[str, Amount]:
    """`{"n1": {"cpu": 2, "memory": 1073741824}}` (cores, bytes) → node → `Amount` in pieces and bytes."""
    from eru.units import cpu_to_pieces, parse_bytes

    if not isinstance(raw, Mapping):
        raise InvalidInput(field, f"expected an object {{node: {{cpu, memory}}}}, got {type(raw).__name__}")
    result: dict[str, Amount] = {}
    for node, entry in raw.items():
        where = f"{field}.{node}"
        if not isinstance(entry, Mapping):
            raise InvalidInput(where, f"expected an object {{cpu, memory}}, got {type(entry).__name__}")
        unknown = set(entry) - {"cpu", "memory"}
        if unknown:
            raise InvalidInput(where, f"unknown fields {sorted(unknown)} (known: cpu, memory)")
        cpu = cpu_to_pieces(entry.get("cpu", 0), share_base, f"{where}.cpu")
        memory = parse_bytes(entry.get("memory", 0), f"{where}.memory")
        if cpu < 0 or memory < 0:
            raise InvalidInput(where, "amounts must be ≥ 0")
        result[str(node)] = Amount(cpu, memory)
    return result


def withheld_json(withheld: Mapping[str, Amount], share_base: int) -> dict[str, dict[str, float | int]]:
    """The inverse of `parse_withheld` (cores, bytes), for the recorded decision."""
    return {node: {"cpu": amount.cpu / share_base, "memory": amount.memory} for node, amount in withheld.items()}
