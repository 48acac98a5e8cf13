"""The compact wire form of a node's command batch (eru.domain.compact): each workload once, specs naming it by
index, defaults left out; it decodes to the model that was sent, the inline form still decodes, and a bad index or
workload is refused naming the field."""

from __future__ import annotations

import msgpack
import pytest

from eru.bus.codec import decode, decode_value, encode
from eru.domain import (
    ContainerEvent,
    ContainerEvents,
    ContainerReport,
    ContainerSpec,
    NodeCommand,
    NodeCommandMessage,
    NodeCommands,
    Workload,
)
from eru.domain.resources import Allocation
from eru.errors import InvalidInput

WEB = Workload.model_validate(
    {"name": "web", "image": "nginx:1", "env": {"A": "1"}, "resources": {"cpu_request": 0.5, "memory_request": "64MiB"}}
)
CACHE = Workload.model_validate({"name": "cache", "image": "redis:7", "labels": {"tier": "cache"}})


def create(container_id: str, workload: Workload, core: str) -> NodeCommand:
    spec = ContainerSpec(
        container_id=container_id,
        deploy_id=f"d-{workload.name}",
        workload=workload,
        allocation=Allocation(cpu_map={core: 50}, memory=64 << 20, numa_node="0"),
        desired=3,
    )
    return NodeCommand(command_id=f"k-{container_id}", node="n1", kind="create", container_id=container_id, spec=spec)


def batch() -> NodeCommands:
    commands = [create("c1", WEB, "0"), create("c2", CACHE, "1"), create("c3", WEB, "2")]
    commands.append(NodeCommand(command_id="k-rm", node="n1", kind="remove", container_id="c0", reason="gone"))
    return NodeCommands(batch_id="b1", node="n1", commands=commands)


def test_the_compact_form_lists_each_workload_once_and_decodes_to_the_same_batch() -> None:
    sent = batch()
    body = encode(sent)
    wire = decode_value(body)
    assert [w["name"] for w in wire["workloads"]] == ["web", "cache"]
    assert [c.get("spec", {}).get("workload") for c in wire["commands"]] == [0, 1, 0, None]
    assert "health_timeout_seconds" not in wire["commands"][0], "fields at their defaults are left out"
    received = decode(body, NodeCommandMessage).root
    assert received == sent
    assert received.commands[0].spec is not None
    assert received.commands[0].spec.workload == WEB
    assert len(body) < len(msgpack.packb(sent.model_dump(mode="json"))) * 0.7


def test_the_inline_form_of_earlier_allocators_still_decodes() -> None:
    sent = batch()
    received = decode(msgpack.packb(sent.model_dump(mode="json")), NodeCommandMessage).root
    assert received == sent


def test_a_workload_index_out_of_range_is_refused_naming_the_spec() -> None:
    wire = decode_value(encode(batch()))
    wire["commands"][2]["spec"]["workload"] = 7
    with pytest.raises(InvalidInput) as caught:
        decode(msgpack.packb(wire), NodeCommandMessage)
    assert caught.value.field == "batch.commands[2].spec.workload"


def test_an_invalid_workload_is_refused_naming_it() -> None:
    wire = decode_value(encode(batch()))
    wire["workloads"][1]["image"] = ""
    with pytest.raises(InvalidInput) as caught:
        decode(msgpack.packb(wire), NodeCommandMessage)
    assert caught.value.field == "batch.workloads[1].image"


def test_a_nodes_event_batch_leaves_defaults_out_and_decodes_to_the_same_events() -> None:
    events = [
        ContainerEvent(node="n1", container_id="c1", deploy_id="d1", command_id="k1", kind="started"),
        ContainerEvent(node="n1", container_id="c2", kind="failed", reason="no image"),
    ]
    sent = ContainerEvents(node="n1", events=events)
    wire = decode_value(encode(sent))
    assert wire["events"][1] == {"node": "n1", "container_id": "c2", "kind": "failed", "reason": "no image"}
    assert decode(encode(sent), ContainerReport).root == sent
