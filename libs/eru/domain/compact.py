"""The compact wire form of a node's command batch (docs/node-agent.md "Batches").

A batch of creates repeats the same workload (image, command, env, resources, labels …) in every command: ~450 of a
create's ~710 msgpack bytes, and most of the agent's decoding (the bounded-shape walk and pydantic's validation of a
`Workload` per command). On the wire a `NodeCommands` therefore lists each distinct workload once in `workloads`
and every spec names its workload by index (`"workload": 0`), with the fields left at their defaults left out.
Decoding puts the validated workloads back into the specs, so the model is the same as the one that was sent.

A batch whose specs carry their workloads inline (the form of earlier allocators) decodes as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel

SPEC_KEYS = ("spec", "replacement")  # the fields of a command that hold a ContainerSpec


def compact_commands(batch_id: str, node: str, commands: Sequence[BaseModel], *, owner: str = "node") -> dict[str, Any]:
    """The wire value of a batch: workloads once, each spec's workload as its index, defaults left out; `node` is
    written under `owner` (a group's batch names its `group`)."""
    index: dict[int, int] = {}  # id() of a workload → its position (the specs of one deploy share the object)
    workloads: list[BaseModel] = []
    wire: list[dict[str, Any]] = []
    for command in commands:
        specs = [(key, spec) for key in SPEC_KEYS if (spec := getattr(command, key)) is not None]
        data = command.model_dump(
            mode="json", exclude={key: {"workload"} for key, _ in specs} or None, exclude_defaults=True
        )
        for key, spec in specs:
            workload = spec.workload
            position = index.get(id(workload))
            if position is None:
                position = index[id(workload)] = len(workloads)
                workloads.append(workload)
            data[key]["workload"] = position
        wire.append(data)
    return {
        "batch_id": batch_id,
        owner: node,
        "workloads": [workload.model_dump(mode="json") for workload in workloads],
        "commands": wire,
    }


def expand_workloads(data: Any, validate_workload: Callable[[Any], Any]) -> Any:
    """A batch's wire value with every workload index replaced by the validated workload (before the model
    validates it). Anything malformed is left as it is, so that validation names the field: an invalid workload
    as `workloads[i]…`, an index out of range as `commands[j].spec.workload`."""
    if not isinstance(data, dict) or "workloads" not in data:
        return data
    raw = data["workloads"]
    if not isinstance(raw, list):
        return data
    try:
        workloads = [validate_workload(item) for item in raw]
    except ValueError:  # pydantic's ValidationError: reported again, with its path, by the field's validation
        return data
    commands = data.get("commands")
    if not isinstance(commands, list):
        return data
    expanded: list[Any] = []
    for command in commands:
        if isinstance(command, dict):
            for key in SPEC_KEYS:
                spec = command.get(key)
                if isinstance(spec, dict):
                    position = spec.get("workload")
                    if type(position) is int and 0 <= position < len(workloads):
                        command = {**command, key: {**spec, "workload": workloads[position]}}
        expanded.append(command)
    rest = {key: value for key, value in data.items() if key not in ("workloads", "commands")}
    return {**rest, "commands": expanded}
