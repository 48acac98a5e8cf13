"""`charge` builds the charged node with its constructor (a batch charges a node per request): every field the node
has is carried over, whatever `NodeResources` gains later, and only usage changes."""

from __future__ import annotations

import dataclasses

from eru.planning.resources import NodeResources, charge, make_plan


def _node() -> NodeResources:
    return NodeResources(
        "n1",
        {"0": 100, "1": 100, "2": 100, "3": 100},
        8 << 30,
        numa={"0": "0", "1": "0", "2": "1", "3": "1"},
        numa_memory={"0": 4 << 30, "1": 4 << 30},
        used_cpu_map={"1": 30},
        used_memory=1 << 30,
        used_numa_memory={"0": 1 << 30},
        batch_cpu=150,
        batch_memory=2 << 30,
    )


def test_every_field_of_the_node_is_set_apart_from_its_defaults() -> None:
    node = _node()
    for field in dataclasses.fields(NodeResources):  # a new field must be set here, and so checked below
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        assert getattr(node, field.name) != default, field.name


def test_charging_changes_usage_only_and_keeps_every_other_field() -> None:
    node = _node()
    plans = [make_plan("n1", {"1": 20, "2": 100}, "1", 1 << 20), make_plan("n1", {"3": 50}, None, 2 << 20)]
    charged = charge(node, plans)
    assert charged == dataclasses.replace(
        node,
        used_cpu_map={"1": 50, "2": 100, "3": 50},
        used_memory=(1 << 30) + (3 << 20),
        used_numa_memory={"0": 1 << 30, "1": 1 << 20},
    )
    assert node.used_cpu_map == {"1": 30}  # the node itself is unchanged
    assert charge(node, []) is node
