"""A node snapshot survives the trip through its `eru plan` JSON form (what decisions record and replay reads)."""

from __future__ import annotations

import json

from eru.planning.resources import NodeResources, node_from_mapping, node_to_mapping


def test_round_trip_through_json() -> None:
    node = NodeResources(
        name="n1",
        cpu_map={"0": 100, "1": 100, "2": 200},
        memory=8 << 30,
        numa={"0": "0", "1": "0", "2": "1"},
        numa_memory={"0": 4 << 30, "1": 4 << 30},
        used_cpu_map={"0": 30},
        used_memory=1 << 30,
        used_numa_memory={"0": 1 << 30},
    )
    assert node_from_mapping(json.loads(json.dumps(node_to_mapping(node))), "node") == node
