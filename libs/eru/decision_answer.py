"""A recorded deploy answer put back whole (docs/replay.md "A decision's answer, the nodes placed on"), pure.

The allocator records a plan's answer with the capacity of the nodes placed on only (`Plan.recorded_answer`,
marked `"capacity_listed": "placed"`): every other node's capacity follows from the recorded input, the capacity
its stage gives (`eru.planning.decide.stage`, the very step `eru plan` and `eru replay` run). `full_answer` lays the
recorded capacities over those, so the result is exactly the answer `eru plan` prints for that input; an answer
without the mark (a refusal, a record from before) is returned as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eru.errors import EruError
from eru.plan_api import deploy_problem
from eru.planning.decide import stage
from eru.planning.plan import CAPACITY_LISTED, PLACED


def is_compact(output: Mapping[str, Any]) -> bool:
    """Whether a recorded deploy answer lists the capacity of the nodes placed on only."""
    return output.get(CAPACITY_LISTED) == PLACED


def input_capacities(problem: Mapping[str, Any]) -> dict[str, int]:
    """node → capacity for every node a deploy problem's request may use, in node order (the `capacity` of its
    answer); `InvalidInput` naming the field when the problem does not validate."""
    snapshot, ask = deploy_problem(problem)
    return stage(snapshot, ask).capacities()


def full_answer(problem: Mapping[str, Any], output: Mapping[str, Any]) -> dict[str, Any]:
    """The recorded answer `output` of the deploy decision whose full input is `problem`, with every node's capacity:
    the recorded ones (the nodes placed on) over those the input gives, in node order. An answer that is not compact
    is returned as it is, and so is a compact one whose input no longer validates (`eru replay` names the field)."""
    if not is_compact(output):
        return dict(output)
    try:
        derived = input_capacities(problem)
    except EruError:
        return dict(output)
    listed: Mapping[str, int] = output.get("capacity") or {}
    capacity = {name: listed.get(name, room) for name, room in derived.items()}
    capacity.update((name, room) for name, room in listed.items() if name not in capacity)  # left for replay to see
    return {key: capacity if key == "capacity" else value for key, value in output.items() if key != CAPACITY_LISTED}


__all__ = ["full_answer", "input_capacities", "is_compact"]
