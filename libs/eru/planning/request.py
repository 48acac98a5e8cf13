"""Planning configuration and request normalisation (docs/planning.md), in exact integer pieces and bytes.

CPU amounts become pieces through `eru.units.cpu_to_pieces` (Decimal, never float multiplication), so 0.29 cores at
share_base 100 is 29 pieces and 0.333 is an error that says it is not a whole number of pieces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from eru.domain.resources import ResourceRequest
from eru.errors import InvalidInput
from eru.units import cpu_to_pieces, parse_bytes

MAX_SHARE_BASE = 1_000_000
MAX_PIECES = 10**15
"""Largest CPU amount accepted, in pieces (about 10¹³ cores at share_base 100): keeps all arithmetic exact."""
MAX_BYTES = 2**62
"""Largest memory amount accepted, in bytes."""
REQUEST_FIELDS = ("cpu_bind", "cpu_request", "cpu_limit", "memory_request", "memory_limit", "memory_soft")


@dataclass(frozen=True, slots=True)
class PlanningConfig:
    """Pod-level knobs of the allocator (docs/planning.md): pieces per core, the fragment-core cap, the memory-prime
    cap."""

    share_base: int = 100
    max_fragment_cores: int = -1
    max_deploy_count: int = 10_000

    def __post_init__(self) -> None:
        _check_int("config.share_base", self.share_base, 1, MAX_SHARE_BASE)
        _check_int("config.max_fragment_cores", self.max_fragment_cores, -1, 10**9)
        _check_int("config.max_deploy_count", self.max_deploy_count, 0, 10**12)

    @property
    def fragment_cap(self) -> int | None:
        """The cap on fragment-source cores per node, None when unlimited."""
        return None if self.max_fragment_cores < 0 else self.max_fragment_cores


@dataclass(frozen=True, slots=True)
class NormalizedRequest:
    """A resource request after the normalisation of docs/planning.md: CPU in pieces, memory in bytes,
    limits 0 = unlimited.

    `batch` marks a request of priority class `batch`: it is placed against the nodes' batch allowance
    (docs/colocation.md).
    """

    cpu_bind: bool
    cpu_request: int
    cpu_limit: int
    memory_request: int
    memory_limit: int
    memory_soft: bool = False
    batch: bool = False


def config_from_mapping(raw: Mapping[str, object] | None, field: str = "config") -> PlanningConfig:
    """A `PlanningConfig` from JSON-like input; unknown keys and bad values are `InvalidInput` naming the field."""
    if raw is None:
        return PlanningConfig()
    if not isinstance(raw, Mapping):
        raise InvalidInput(field, f"expected an object, got {type(raw).__name__}")
    known = {"share_base", "max_fragment_cores", "max_deploy_count"}
    for key in raw:
        if key not in known:
            raise InvalidInput(f"{field}.{key}", f"unknown field (known: {', '.join(sorted(known))})")
    values: dict[str, int] = {}
    for key in known & raw.keys():
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput(f"{field}.{key}", f"expected an integer, got {value!r}")
        values[key] = value
    return PlanningConfig(**values)


def normalize_request(
    raw: Mapping[str, object] | ResourceRequest, config: PlanningConfig, field_prefix: str = "request"
) -> NormalizedRequest:
    """The normalisation of docs/planning.md, in the order given there; every error names `<field_prefix>.<field>`."""
    values: Mapping[str, object] = raw.model_dump() if isinstance(raw, ResourceRequest) else raw
    if not isinstance(values, Mapping):
        raise InvalidInput(field_prefix, f"expected an object, got {type(values).__name__}")
    for key in values:
        if key not in REQUEST_FIELDS:
            raise InvalidInput(f"{field_prefix}.{key}", f"unknown field (known: {', '.join(REQUEST_FIELDS)})")
    share_base = config.share_base
    return apply_rules(
        flag(values, "cpu_bind", field_prefix),
        pieces(values, "cpu_request", share_base, field_prefix),
        pieces(values, "cpu_limit", share_base, field_prefix),
        byte_field(values, "memory_request", field_prefix),
        byte_field(values, "memory_limit", field_prefix),
        flag(values, "memory_soft", field_prefix),
        share_base,
        field_prefix,
    )


def apply_rules(
    cpu_bind: bool,
    cpu_request: int,
    cpu_limit: int,
    memory_request: int,
    memory_limit: int,
    memory_soft: bool,
    share_base: int,
    field_prefix: str = "request",
) -> NormalizedRequest:
    """The rules of docs/planning.md over amounts already in pieces and bytes (also used for realloc results)."""
    if cpu_request == 0 and cpu_limit > 0:
        cpu_request = cpu_limit
    for name, amount in (("memory_request", memory_request), ("memory_limit", memory_limit)):
        if amount < 0:
            raise InvalidInput(f"{field_prefix}.{name}", f"must be ≥ 0 bytes, got {amount}", value=amount)
    for name, amount in (("cpu_request", cpu_request), ("cpu_limit", cpu_limit)):
        if amount < 0:
            cores = amount / share_base
            raise InvalidInput(f"{field_prefix}.{name}", f"must be ≥ 0 cores, got {cores}", value=cores)
    if cpu_bind and cpu_request == 0:
        raise InvalidInput(f"{field_prefix}.cpu_request", "cpu_bind needs a CPU request of at least one piece")
    if memory_request == 0 and memory_limit > 0:
        memory_request = memory_limit
    if 0 < cpu_limit < cpu_request:
        cpu_limit = cpu_request
    if 0 < memory_limit < memory_request:
        memory_limit = memory_request
    if cpu_bind and cpu_limit > cpu_request:
        cpu_request = cpu_limit
    return NormalizedRequest(cpu_bind, cpu_request, cpu_limit, memory_request, memory_limit, memory_soft)


def flag(values: Mapping[str, object], name: str, prefix: str) -> bool:
    """A boolean field (false when missing)."""
    value = values.get(name, False)
    if not isinstance(value, bool):
        raise InvalidInput(f"{prefix}.{name}", f"expected true or false, got {value!r}")
    return value


def pieces(values: Mapping[str, object], name: str, share_base: int, prefix: str) -> int:
    """A CPU field in exact pieces (0 when missing), within ±MAX_PIECES."""
    field = f"{prefix}.{name}"
    amount = cpu_to_pieces(values.get(name, 0), share_base, field)
    if abs(amount) > MAX_PIECES:
        raise InvalidInput(field, f"out of range: at most {MAX_PIECES // share_base} cores", limit=MAX_PIECES)
    return amount


def byte_field(values: Mapping[str, object], name: str, prefix: str) -> int:
    """A memory field in bytes (0 when missing), within ±MAX_BYTES."""
    field = f"{prefix}.{name}"
    amount = parse_bytes(values.get(name, 0), field)
    if abs(amount) > MAX_BYTES:
        raise InvalidInput(field, f"out of range: at most {MAX_BYTES} bytes", limit=MAX_BYTES)
    return amount


def _check_int(field: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(field, f"expected an integer, got {value!r}")
    if not low <= value <= high:
        raise InvalidInput(field, f"must be within {low}..{high}, got {value}", minimum=low, maximum=high)
