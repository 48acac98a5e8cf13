"""Wire forms of resource quantities and names: what users and services put in messages (docs/planning.md).

Memory accepts integers or human strings (`512MiB`, `2G`) at every user edge; CPU is in cores. Normalisation and
piece arithmetic are the planning core's (`eru.planning.normalize`); these models only check types and signs.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from eru.domain.limits import NAME_MAX, NAME_PATTERN
from eru.errors import InvalidInput
from eru.units import parse_bytes


def _bytes(value: object) -> int:
    try:
        return parse_bytes(value, "memory")
    except InvalidInput as error:
        raise ValueError(error.reason) from None


Bytes = Annotated[int, BeforeValidator(_bytes)]
PriorityClass = Literal["prod", "mid", "batch"]
Name = Annotated[str, StringConstraints(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)]
"""A workload, pod or node name (eru.domain.limits, docs/cli.md "Limits")."""


class Frozen(BaseModel):
    """Base of every domain model: immutable, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ResourceRequest(Frozen):
    """What a workload asks for (docs/planning.md); a limit of 0 means unlimited."""

    cpu_bind: bool = False
    cpu_request: float = 0.0
    cpu_limit: float = 0.0
    memory_request: Bytes = 0
    memory_limit: Bytes = 0
    memory_soft: bool = False


class Allocation(Frozen):
    """One container's concrete share of a node: cores → pieces, the NUMA node, memory bytes (docs/planning.md)."""

    cpu_map: dict[str, int] = Field(default_factory=dict)
    numa_node: str | None = None
    memory: int = 0
    share_base: int = 100
    cpu_bind: bool = False
    cpu_limit: float = 0.0
    memory_limit: int = 0
    memory_soft: bool = False
