"""Codec, envelope and subject names: the parts of the bus that need no server."""

from __future__ import annotations

import json
import os
import uuid
from datetime import UTC, datetime, timedelta, timezone

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from eru.bus import subjects
from eru.bus.codec import JSON, MSGPACK, decode, encode, media_type
from eru.bus.envelope import Envelope, format_time, new_envelope, new_id
from eru.errors import InvalidInput


class Limits(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_request: float = Field(ge=0)
    cpu_map: dict[str, int] = Field(default_factory=dict)


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    request: Limits
    command: list[str] = Field(default_factory=list)
    at: datetime | None = None


names = st.text(min_size=1, max_size=20)
messages = st.builds(
    Message,
    name=names,
    request=st.builds(
        Limits,
        cpu_request=st.floats(min_value=0, max_value=1e6, allow_nan=False),
        cpu_map=st.dictionaries(st.text(max_size=4), st.integers(min_value=0, max_value=10**6), max_size=4),
    ),
    command=st.lists(names, max_size=4),
    at=st.none() | st.datetimes(timezones=st.just(UTC)),
)


@settings(max_examples=60, deadline=None)
@given(messages)
def test_msgpack_and_json_bodies_round_trip(message: Message) -> None:
    assert decode(encode(message), Message) == message
    assert decode(encode(message, JSON), Message, JSON) == message
    assert msgpack.unpackb(encode(message)) == json.loads(encode(message, JSON))


def test_schema_violation_names_the_field_path() -> None:
    body = msgpack.packb({"name": "a", "request": {"cpu_request": -1}, "command": ["ok", 3]})
    with pytest.raises(InvalidInput) as caught:
        decode(body, Message)
    assert caught.value.field == "request.cpu_request"
    assert "greater than or equal to 0" in caught.value.reason
    fields = [problem["field"] for problem in caught.value.details["errors"]]
    assert fields == ["request.cpu_request", "command[1]"]
    with pytest.raises(InvalidInput) as prefixed:
        decode(msgpack.packb({"cpu_request": "x"}), Limits, prefix="request")
    assert prefixed.value.field == "request.cpu_request"


@pytest.mark.parametrize(
    ("body", "content_type", "reason"),
    [
        (b"\xc1", None, "not valid msgpack"),
        (b"\x92\x01", None, "not valid msgpack"),
        (b"\x01\x02", None, "extra bytes"),
        (b"", None, "empty"),
        (b"{not json", JSON, "not valid JSON"),
        # json.loads(bytes) guessed UTF-16 from the zero byte: "'utf-16-le' codec can't decode byte 0x65"
        (b"\xff\x00garbage", JSON, "not valid JSON: not UTF-8 text (byte 0xff at position 0)"),
        (msgpack.packb([1, 2]), None, "valid dictionary"),
    ],
)
def test_malformed_bodies_are_invalid_input_on_body(body: bytes, content_type: str | None, reason: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        decode(body, Message, content_type)
    assert caught.value.field == "body"
    assert reason in caught.value.reason


def test_content_types() -> None:
    assert media_type(None) == MSGPACK
    assert media_type("application/json; charset=utf-8") == JSON
    assert media_type("application/x-msgpack") == MSGPACK
    with pytest.raises(InvalidInput, match="Content-Type: unsupported 'text/plain'"):
        media_type("text/plain")


def test_envelope_round_trips_through_headers_and_dedupes_by_ce_id() -> None:
    moment = datetime(2025, 1, 2, 3, 4, 5, 123456, tzinfo=timezone(timedelta(hours=8)))
    root = new_envelope("eru.deploy.request", "cli", time=moment)
    child = root.caused("eru.deploy.planned", "allocator/r1", time=moment)
    headers = child.to_headers()
    assert headers["ce-specversion"] == "1.0"
    assert headers["ce-time"] == "2025-01-01T19:04:05.123456Z"
    assert headers["Nats-Msg-Id"] == headers["ce-id"] == child.id
    assert headers["ce-correlationid"] == root.id, "a new chain is correlated by its first message"
    assert headers["ce-causationid"] == root.id
    assert Envelope.from_headers(headers) == child
    assert "ce-causationid" not in root.to_headers()


@pytest.mark.parametrize(
    ("drop_or_change", "field"),
    [
        ({"ce-id": None}, "ce-id"),
        ({"ce-type": ""}, "ce-type"),
        ({"ce-time": "yesterday"}, "ce-time"),
        ({"ce-time": "2025-01-01T00:00:00"}, "ce-time"),
        ({"ce-specversion": "0.3"}, "ce-specversion"),
    ],
)
def test_bad_envelope_headers_name_the_header(drop_or_change: dict[str, str | None], field: str) -> None:
    headers = new_envelope("t", "s").to_headers()
    for name, value in drop_or_change.items():
        if value is None:
            headers.pop(name)
        else:
            headers[name] = value
    with pytest.raises(InvalidInput) as caught:
        Envelope.from_headers(headers)
    assert caught.value.field == field


def test_ids_are_uuid7_and_sort_by_time() -> None:
    ids = [new_id() for _ in range(200)]
    assert len(set(ids)) == 200
    assert all(uuid.UUID(i).version == 7 for i in ids)
    assert [i[:13] for i in ids] == sorted(i[:13] for i in ids), "the millisecond prefix never goes backwards"


def test_a_forked_child_does_not_hand_out_its_parents_next_ids() -> None:
    new_id()  # the random bytes for the next ids are read ahead
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write_end, new_id().encode())
        os._exit(0)
    os.close(write_end)
    child = os.read(read_end, 64).decode()
    os.waitpid(pid, 0)
    os.close(read_end)
    assert child[15:] != new_id()[15:], "the random part after the version digit"


def test_naive_time_is_refused() -> None:
    with pytest.raises(InvalidInput, match="ce-time"):
        format_time(datetime(2025, 1, 1))


def test_subjects_are_built_from_checked_tokens() -> None:
    assert subjects.deploy_event("d-1", "planned") == "eru.deploy.d-1.planned"
    assert subjects.node_command("node-1", "create") == "eru.node.node-1.cmd.create"
    assert subjects.node_commands("node-1") == "eru.node.node-1.cmd.*"
    assert subjects.node_condition("n_2") == "eru.node.n_2.condition"
    assert subjects.container_event("node-1", "started") == "eru.container.node-1.started"
    assert subjects.metrics("node-1") == "eru.metrics.node-1"
    assert subjects.eviction("node-1") == "eru.eviction.node-1"
    assert subjects.dead_letter("eru.deploy.request") == "eru.dlq.eru.deploy.request"
    assert subjects.original_of_dead_letter("eru.dlq.eru.metrics.n1") == "eru.metrics.n1"


@pytest.mark.parametrize("bad", ["", "a.b", "node*", ">", "has space", "-lead", "x" * 129, "ü"])
def test_unsafe_node_names_are_refused_naming_the_field(bad: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        subjects.node_command(bad, "create")
    assert caught.value.field == "node"
    with pytest.raises(InvalidInput, match=r"^command: "):
        subjects.node_command("node-1", "cr.eate")
    with pytest.raises(InvalidInput, match=r"^subject: "):
        subjects.dead_letter("eru.*.x")
