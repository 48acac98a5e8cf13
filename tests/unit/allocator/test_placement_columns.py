"""The distributor hand-off as columns (docs/planning.md "Per-batch cost"): the allocator sends a batch's nodes as a
few lists, their names once per body, and the distributor answers exactly what the slot form and `place_locally`
answer, in every mode; malformed columns are refused naming the field."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from eru.bus.codec import MSGPACK, decode_value, encode_value
from eru.domain import DeployRequest, PlaceBatchRequest, PlaceRequest
from eru.errors import EruError, InvalidInput
from eru.planning import NodeResources, PlanningConfig, normalize_request
from eru.planning.decide import conclude, place_locally, stage
from eru.planning.distribute import SlotColumns, decide, decide_many, place_columns
from eru.planning.modes import NodeSlot
from eru.planning.snapshot import ClusterSnapshot, DeployAsk
from eru_allocator.deploy.placing import MAX_CALL_BYTES, batch_wire, place_wire

CONFIG = PlanningConfig()
MODES = ["auto", "each", "fill", "global", "drained"]


def _nodes(count: int) -> tuple[NodeResources, ...]:
    """Nodes of 4 to 11 cores, some partly used, so capacities, usage and rate differ."""
    nodes = []
    for index in range(count):
        cores = 4 + index % 8
        used = {"0": 100} if index % 3 == 0 else {}
        nodes.append(
            NodeResources(
                f"n{index:03d}",
                {str(core): 100 for core in range(cores)},
                (8 + index % 5) << 30,
                used_cpu_map=used,
                used_memory=(index % 4) << 30,
            )
        )
    return tuple(nodes)


def _staged(mode: str, count: int, *, bind: bool = True, counts: dict[str, int] | None = None) -> Any:
    request = normalize_request({"cpu_bind": bind, "cpu_request": 1, "memory_request": "1GiB"}, CONFIG)
    snapshot = ClusterSnapshot(config=CONFIG, nodes=_nodes(24), counts={"w": counts or {}})
    return stage(snapshot, DeployAsk(request, mode, count, workload="w"))


def _req(mode: str, count: int) -> DeployRequest:
    return DeployRequest.model_validate(
        {"pod": "p", "mode": mode, "count": count, "workload": {"name": "w", "image": "busybox"}}
    )


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("bind", [True, False])
def test_columns_slots_and_place_locally_agree_in_every_mode(mode: str, bind: bool) -> None:
    count = 2 if mode in ("each", "fill") else 30
    staged = _staged(mode, count, bind=bind, counts={"n001": 1, "n005": 2})
    local = place_locally(staged)
    columns = staged.columns()
    wire = place_wire(_req(mode, count), columns, {})
    from_columns: Any = decide(PlaceRequest.model_validate(decode_value(encode_value(wire), MSGPACK)))
    slots = [NodeSlot(s.name, s.capacity, s.count, s.usage, s.rate) for s in staged.slots()]
    from_slots = decide(PlaceRequest(mode=mode, count=count, slots=[_slot(s) for s in slots]))
    assert not isinstance(local, EruError)
    assert from_columns.placements == {name: n for name, n in local.items() if n}
    assert from_slots.placements == from_columns.placements
    assert place_columns(mode, columns, count, 0, {}) == from_columns.placements
    conclude(staged, from_columns.placements)  # a valid plan for the decision


def _slot(slot: NodeSlot) -> dict[str, Any]:
    return {"name": slot.name, "capacity": slot.capacity, "count": slot.count, "usage": slot.usage, "rate": slot.rate}


def test_a_batch_sends_its_node_names_once_and_each_ask_is_answered_as_alone() -> None:
    asks = []
    expected = []
    for mode, count in (("auto", 30), ("global", 12), ("each", 2), ("auto", 10_000)):
        columns = _staged(mode, count).columns()
        asks.append((place_wire(_req(mode, count), columns, {}, names=False), columns.names))
        try:
            expected.append({"placements": place_columns(mode, columns, count, 0, {})})
        except EruError as error:
            expected.append({"code": error.code})
    (body,) = batch_wire(asks)
    assert body["names"] == list(asks[0][1])
    assert all("names" not in ask["columns"] for ask in body["asks"])
    results = decide_many(PlaceBatchRequest.model_validate(decode_value(encode_value(body), MSGPACK))).results
    for outcome, wanted in zip(results, expected, strict=True):
        if "placements" in wanted:
            assert outcome.placements == wanted["placements"]
        else:
            assert outcome.error is not None
            assert outcome.error["code"] == wanted["code"]


def test_a_batch_of_five_thousand_nodes_ships_a_few_bytes_per_node() -> None:
    names = [f"sim-{index:05d}" for index in range(5000)]
    columns = SlotColumns(names, [128] * 5000, None)
    asks = [(place_wire(_req("auto", 100), columns, {}, names=False), columns.names) for _ in range(4)]
    bodies = [encode_value(body) for body in batch_wire(asks)]
    assert len(bodies) == 1
    # the names once (10 bytes + header each) and two bytes per node and ask for capacity: no object per node
    assert len(bodies[0]) < 5000 * (11 + 4 * 2) + 1000


def test_bodies_split_by_size_and_by_names() -> None:
    big = SlotColumns([f"n{i:06d}" for i in range(60_000)], [1] * 60_000)
    other = SlotColumns(["a", "b"], [1, 1])
    wire = place_wire(_req("auto", 1), big, {}, names=False)
    asks = [(wire, big.names), (wire, big.names), (place_wire(_req("auto", 1), other, {}, names=False), other.names)]
    bodies = batch_wire(asks)
    assert [len(body["asks"]) for body in bodies] == [1, 1, 1], "60,000 nodes × 6 bytes twice pass MAX_CALL_BYTES"
    assert 60_000 * 6 < MAX_CALL_BYTES < 2 * 60_000 * 6
    assert bodies[2]["names"] == ["a", "b"]
    assert all(len(encode_value(body)) < 1 << 20 for body in bodies)


@pytest.mark.parametrize(
    ("columns", "field", "reason"),
    [
        ({"names": ["a", "b"], "capacity": [1]}, "columns.capacity", "has 1 values for 2 nodes"),
        ({"names": ["a"], "capacity": [1], "count": [0, 0]}, "columns.count", "has 2 values for 1 nodes"),
        ({"names": ["a", "b", "a"], "capacity": [1, 1, 1]}, "columns.names[2]", "appears more than once"),
        ({"capacity": [1]}, "columns.names", "required"),
    ],
)
def test_malformed_columns_are_refused_naming_the_field(columns: dict[str, Any], field: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        decide(PlaceRequest.model_validate({"mode": "auto", "count": 1, "columns": columns}))
    assert caught.value.details["field"] == field
    assert reason in caught.value.message


def test_slots_and_columns_together_are_refused_and_a_batch_names_the_ask() -> None:
    both = {"mode": "auto", "count": 1, "slots": [{"name": "a", "capacity": 1}], "columns": {"capacity": [1]}}
    with pytest.raises(InvalidInput) as caught:
        decide(PlaceRequest.model_validate(both))
    assert caught.value.details["field"] == "slots"
    good = {"mode": "auto", "count": 1, "columns": {"capacity": [1, 1]}}
    bad = {"mode": "auto", "count": 1, "columns": {"capacity": [1]}}
    batch = PlaceBatchRequest.model_validate({"names": ["a", "b"], "asks": [good, bad]})
    first, second = decide_many(batch).results
    assert first.placements == {"a": 1}
    assert second.error is not None
    assert second.error["details"]["field"] == "asks[1].columns.capacity"


def test_a_negative_capacity_is_refused_by_the_model() -> None:
    with pytest.raises(ValueError, match="capacity"):
        PlaceRequest.model_validate({"mode": "auto", "count": 1, "columns": {"names": ["a"], "capacity": [-1]}})


def test_columns_of_a_filtered_request_are_its_nodes_only() -> None:
    staged = _staged("auto", 3)
    fewer = replace(staged, nodes=staged.nodes[:5], analyses=staged.analyses[:5], usages=None)
    assert list(fewer.columns().names) == [node.name for node in staged.nodes[:5]]
