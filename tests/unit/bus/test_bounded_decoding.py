"""Bounded decoding (docs/bus.md "Bounded decoding"): size, depth and collection length are refused for JSON and
msgpack alike, naming the field `body` and the limit, and everything within the limits decodes as before."""

from __future__ import annotations

import json

import msgpack
import pytest

from eru.bounded import DecodeLimits
from eru.bus.codec import JSON, MSGPACK, decode_value, set_decode_limits
from eru.errors import InvalidInput

SMALL = DecodeLimits(max_body_bytes=4096, max_depth=8, max_collection_length=50)


def nested(depth: int) -> object:
    value: object = []
    for _ in range(depth - 1):
        value = [value]
    return value


def body(value: object, kind: str) -> bytes:
    return json.dumps(value).encode() if kind == JSON else msgpack.packb(value)


@pytest.mark.parametrize("kind", [JSON, MSGPACK])
def test_within_the_limits_everything_decodes(kind: str) -> None:
    value = {"a": nested(7), "b": list(range(50)), "c": {str(i): i for i in range(50)}}
    assert decode_value(body(value, kind), kind, SMALL) == value


@pytest.mark.parametrize("kind", [JSON, MSGPACK])
def test_too_deep_is_refused_naming_the_limit(kind: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        decode_value(body({"workload": nested(9)}, kind), kind, DecodeLimits(max_depth=9))
    assert caught.value.field == "body"
    assert "nested deeper than 9 levels at workload[0]" in caught.value.reason
    assert "bus.max_depth" in caught.value.reason


@pytest.mark.parametrize("kind", [JSON, MSGPACK])
def test_ten_thousand_levels_never_reach_the_interpreters_stack(kind: str) -> None:
    data = b"[" * 10_000 + b"]" * 10_000 if kind == JSON else b"\x91" * 10_000 + b"\x90"
    with pytest.raises(InvalidInput, match="nested deeper than 64 levels"):
        decode_value(data, kind)


@pytest.mark.parametrize("kind", [JSON, MSGPACK])
def test_too_long_a_collection_is_refused_naming_where(kind: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        decode_value(body({"workload": {"command": list(range(51))}}, kind), kind, SMALL)
    assert caught.value.field == "body"
    assert "51" in caught.value.reason
    assert "max_collection_length" in caught.value.reason


@pytest.mark.parametrize("kind", [JSON, MSGPACK])
def test_too_big_a_body_is_refused_before_decoding(kind: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        decode_value(body({"x": "y" * 5000}, kind), kind, SMALL)
    assert "above the limit of 4096 (bus.max_body_bytes)" in caught.value.reason


def test_the_process_wide_limits_are_set_once_and_checked() -> None:
    with pytest.raises(InvalidInput, match=r"bus\.max_depth"):
        set_decode_limits(DecodeLimits(max_depth=0))
    set_decode_limits(SMALL)
    try:
        with pytest.raises(InvalidInput):
            decode_value(body(nested(9), JSON), JSON)
    finally:
        set_decode_limits(DecodeLimits())
    assert decode_value(body(nested(9), JSON), JSON) == nested(9)


@pytest.mark.parametrize("kind", [JSON, MSGPACK])
@pytest.mark.parametrize("at", [0, 20, 39])
def test_a_long_list_with_one_collection_among_its_leaves_is_still_walked(kind: str, at: int) -> None:
    # a list longer than the leaves-only shortcut's threshold whose one non-leaf is too deep, or too long
    deep: list[object] = list(range(40))
    deep[at] = nested(8)
    with pytest.raises(InvalidInput, match=f"nested deeper than 8 levels at columns\\[{at}\\]"):
        decode_value(body({"columns": deep}, kind), kind, SMALL)
    wide: list[object] = [f"n{i}" for i in range(40)]
    wide[at] = {"capacity": list(range(51))}
    reason = f"columns\\[{at}\\].capacity holds 51 items" if kind == JSON else "51 exceeds max_array_len"  # msgpack's
    with pytest.raises(InvalidInput, match=reason):
        decode_value(body({"columns": wide}, kind), kind, SMALL)
    leaves = [None, True, 1, 1.5, "x", b"y" if kind == MSGPACK else "y"] * 8  # every kind of leaf, 48: nothing below
    assert decode_value(body({"columns": leaves}, kind), kind, SMALL) == {"columns": leaves}
