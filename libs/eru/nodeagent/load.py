"""Load models of the simulated runtime (docs/node-agent.md `sim`): what a simulated container uses, as a pure function
of the time since it started and a seed.

A workload chooses its model with the label `eru.sim.load` (JSON), for example
`{"kind": "step", "steps": [{"at": 0, "cpu": 0.2, "memory": "64MiB"}, {"at": 30, "cpu": 1.5, "memory": "1GiB"}]}`;
without one the node's default (setting `node_agent.sim_load`), else its request (`constant` at cpu_request cores
and memory_request bytes). Noise is drawn from a
generator seeded by (seed, container id, time slot), so the same seed gives the same usage at the same time, in any
order of evaluation and in any process.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import Field, TypeAdapter, ValidationError, model_validator

from eru.domain.resources import Bytes, Frozen, ResourceRequest
from eru.settings import describe_validation_error

LOAD_LABEL = "eru.sim.load"
EXIT_AFTER_LABEL = "eru.sim.exit_after"
UNHEALTHY_LABEL = "eru.sim.unhealthy"


class ConstantLoad(Frozen):
    """The same usage all the time."""

    kind: Literal["constant"] = "constant"
    cpu: float = Field(default=0.0, ge=0)
    memory: Bytes = Field(default=0, ge=0)


class LoadStep(Frozen):
    """From `at` seconds after start on, use `cpu` cores and `memory` bytes."""

    at: float = Field(ge=0)
    cpu: float = Field(ge=0)
    memory: Bytes = Field(default=0, ge=0)


class StepLoad(Frozen):
    """Piecewise constant usage; before the first step nothing is used."""

    kind: Literal["step"] = "step"
    steps: list[LoadStep] = Field(min_length=1)

    @model_validator(mode="after")
    def _ascending(self) -> StepLoad:
        times = [step.at for step in self.steps]
        if times != sorted(times):
            raise ValueError("steps must be in ascending order of 'at'")
        return self


class NoisyLoad(Frozen):
    """A base usage plus uniform noise of at most ±`cpu_noise` / ±`memory_noise`, redrawn every `period_seconds`."""

    kind: Literal["noisy"] = "noisy"
    cpu: float = Field(default=0.0, ge=0)
    memory: Bytes = Field(default=0, ge=0)
    cpu_noise: float = Field(default=0.0, ge=0)
    memory_noise: Bytes = Field(default=0, ge=0)
    period_seconds: float = Field(default=1.0, gt=0)


class TraceLoad(Frozen):
    """A recorded trace replayed sample by sample (`interval_seconds` apart), looping or holding the last sample."""

    kind: Literal["trace"] = "trace"
    interval_seconds: float = Field(default=1.0, gt=0)
    cpu: list[Annotated[float, Field(ge=0)]] = Field(min_length=1)
    memory: list[Annotated[int, Field(ge=0)]] = Field(default_factory=list)
    loop: bool = True

    @model_validator(mode="after")
    def _same_length(self) -> TraceLoad:
        if self.memory and len(self.memory) != len(self.cpu):
            raise ValueError(f"memory has {len(self.memory)} samples, cpu has {len(self.cpu)}; give both or cpu only")
        return self


AnyLoad = ConstantLoad | StepLoad | NoisyLoad | TraceLoad
LoadModel = Annotated[AnyLoad, Field(discriminator="kind")]
_LOAD_ADAPTER: TypeAdapter[AnyLoad] = TypeAdapter(LoadModel)


@dataclass(frozen=True)
class Usage:
    """Usage at one moment: cores and bytes."""

    cpu: float
    memory: int


def parse_load(text: str, field: str = f"workload.labels.{LOAD_LABEL}") -> AnyLoad:
    """A load model from its JSON text; `InvalidInput` naming the field (and the model's inner field) otherwise."""
    try:
        return _LOAD_ADAPTER.validate_json(text)
    except ValidationError as error:
        raise describe_validation_error(error, prefix=field) from None


def load_for(labels: Mapping[str, str], request: ResourceRequest, default: AnyLoad | None = None) -> AnyLoad:
    """The load model a workload asked for with its labels, else the node's default, else constant at its request."""
    text = labels.get(LOAD_LABEL)
    if text is not None:
        return parse_load(text)
    if default is not None:
        return default
    return ConstantLoad(cpu=request.cpu_request, memory=request.memory_request)


def _draw(seed: int, container_id: str, slot: int) -> random.Random:
    digest = hashlib.sha256(f"{seed}:{container_id}:{slot}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def usage_at(model: AnyLoad, elapsed: float, *, seed: int, container_id: str) -> Usage:
    """What `model` uses `elapsed` seconds after the container started (0 before it started)."""
    if elapsed < 0:
        return Usage(0.0, 0)
    if isinstance(model, ConstantLoad):
        return Usage(model.cpu, model.memory)
    if isinstance(model, StepLoad):
        current = Usage(0.0, 0)
        for step in model.steps:
            if step.at > elapsed:
                break
            current = Usage(step.cpu, step.memory)
        return current
    if isinstance(model, NoisyLoad):
        slot = math.floor(elapsed / model.period_seconds)
        rng = _draw(seed, container_id, slot)
        cpu = max(0.0, model.cpu + rng.uniform(-model.cpu_noise, model.cpu_noise))
        memory = max(0, model.memory + round(rng.uniform(-model.memory_noise, model.memory_noise)))
        return Usage(cpu, memory)
    index = math.floor(elapsed / model.interval_seconds)
    if model.loop:
        index %= len(model.cpu)
    else:
        index = min(index, len(model.cpu) - 1)
    return Usage(model.cpu[index], model.memory[index] if model.memory else 0)


@dataclass(frozen=True)
class Limited:
    """Usage after the container's limits, with the throttling the CPU limit caused over an interval."""

    cpu: float
    memory: int
    throttled_periods: int
    throttled_seconds: float


def apply_limits(
    demand: Usage, *, cpu_cap: float, memory_cap: int, interval_seconds: float, period_seconds: float = 0.1
) -> Limited:
    """Cap a demand at the container's CPU (cores it may use; 0 = none) and memory (bytes; 0 = none) limits.

    When CPU demand exceeds the cap every CFS period of the interval is throttled, for the share of the time the
    demand could not run ((demand − cap) / demand of the interval).
    """
    cpu = demand.cpu if cpu_cap <= 0 else min(demand.cpu, cpu_cap)
    memory = demand.memory if memory_cap <= 0 else min(demand.memory, memory_cap)
    if cpu_cap > 0 and demand.cpu > cpu_cap and interval_seconds > 0:
        periods = max(1, round(interval_seconds / period_seconds))
        return Limited(cpu, memory, periods, interval_seconds * (demand.cpu - cpu_cap) / demand.cpu)
    return Limited(cpu, memory, 0, 0.0)


def share_node_cpu(demands: Mapping[str, float], node_cores: float) -> dict[str, float]:
    """When the containers of a node want more CPU than it has, each gets the same fraction of its demand."""
    total = sum(demands.values())
    if total <= node_cores or total <= 0:
        return dict(demands)
    scale = node_cores / total
    return {key: value * scale for key, value in demands.items()}
