"""One message or a node's batch (`NodeCommandMessage`, `ContainerReport`): decoded by shape, and a bad one is refused
with the field that is wrong, without a wrapper's name in front of a single message's fields."""

from __future__ import annotations

import msgpack
import pytest

from eru.bus.codec import decode
from eru.domain import ContainerEvent, ContainerReport, NodeCommand, NodeCommandMessage, NodeCommands
from eru.errors import InvalidInput

EVENT = {"node": "n1", "container_id": "c1", "kind": "started"}
COMMAND = {"command_id": "k1", "node": "n1", "kind": "remove", "container_id": "c1"}


def packed(value: object) -> bytes:
    return msgpack.packb(value)


def test_one_event_or_a_batch_decode_to_their_events_in_order() -> None:
    one = decode(packed(EVENT), ContainerReport)
    assert isinstance(one.root, ContainerEvent)
    assert [e.container_id for e in one.events()] == ["c1"]
    batch = decode(packed({"node": "n1", "events": [EVENT, {**EVENT, "container_id": "c2"}]}), ContainerReport)
    assert [e.container_id for e in batch.events()] == ["c1", "c2"]


def test_one_command_or_a_batch_decode_to_their_commands_in_order() -> None:
    one = decode(packed(COMMAND), NodeCommandMessage)
    assert isinstance(one.root, NodeCommand)
    batch = decode(packed({"batch_id": "b1", "node": "n1", "commands": [COMMAND, COMMAND]}), NodeCommandMessage)
    assert isinstance(batch.root, NodeCommands)
    assert [c.command_id for c in batch.commands()] == ["k1", "k1"]


@pytest.mark.parametrize(
    ("body", "field", "reason"),
    [
        ({**EVENT, "kind": "exploded"}, "kind", "Input should be"),
        ({"node": "n1", "events": []}, "batch.events", "at least 1 item"),
        ({"node": "n1", "events": [{**EVENT, "kind": "x"}]}, "batch.events[0].kind", "Input should be"),
        ([1, 2], "body", "valid dictionary"),
    ],
)
def test_a_bad_report_names_the_field(body: object, field: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        decode(packed(body), ContainerReport)
    assert refused.value.field == field
    assert reason in refused.value.reason


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**COMMAND, "kind": "launch"}, "kind"),
        ({"batch_id": "b1", "node": "n1", "commands": []}, "batch.commands"),
        ({"batch_id": "", "node": "n1", "commands": [COMMAND]}, "batch.batch_id"),
        ({"batch_id": "b1", "node": "n 1", "commands": [COMMAND]}, "batch.node"),
        (
            {"batch_id": "b1", "node": "n1", "commands": [{**COMMAND, "container_id": 5}]},
            "batch.commands[0].container_id",
        ),
    ],
)
def test_a_bad_command_message_names_the_field(body: object, field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        decode(packed(body), NodeCommandMessage)
    assert refused.value.field == field
