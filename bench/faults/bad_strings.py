"""Strings no one can write, for the seeded fuzzes (docs/bus.md "Bounded decoding", docs/cli.md "Limits"): lone
surrogates sent as JSON `\\ud800` escapes, bytes that are not UTF-8 inside a JSON or msgpack string, and strings far
above any field's limit. Each fuzzed value keeps its shape; some of its strings (and map keys) are spoiled, at least
one, and the body is written in the style that carries the spoiled strings onto the wire."""

from __future__ import annotations

import json
import random
from typing import Any

import msgpack

JSON = "application/json"
MSGPACK = "application/msgpack"
STYLES = ("escape", "raw_json", "raw_msgpack", "overlong")
ESCAPED = ("\ud800", "\udfff", "\ud83d", "\udc00x")  # lone surrogates: json.dumps writes them as `\ud800` escapes
RAW = (b"\xff", b"\xed\xa0\x80", b"\xc3", b"\x80", b"ok\xfe", b"\xf4\x90\x80\x80")  # not UTF-8 (kept as surrogates)
OVERLONG = (300, 5_000, 200_000)  # above every name (63, 128) and image (255) limit; 200,000 stays under 1 MiB


def bad_string(style: str, rng: random.Random) -> str:
    """One spoiled string of `style` (prefixed `fuzz-`, so a value that gets through names only fuzz things)."""
    if style == "escape":
        return f"fuzz-{rng.randint(0, 99)}" + rng.choice(ESCAPED) + "x" * rng.randint(0, 3)
    if style in ("raw_json", "raw_msgpack"):
        return f"fuzz-{rng.randint(0, 99)}" + rng.choice(RAW).decode("utf-8", "surrogateescape")
    return "fuzz-" + "x" * rng.choice(OVERLONG)


def spoil(value: Any, style: str, rng: random.Random, share: float = 0.5) -> Any:
    """`value` with about `share` of its strings and map keys spoiled (at least one: a value with no string at all
    gets a spoiled key, or is replaced by a map holding one)."""
    spoiled = 0

    def walk(item: Any) -> Any:
        nonlocal spoiled
        if isinstance(item, str):
            if rng.random() < share:
                spoiled += 1
                return bad_string(style, rng)
            return item
        if isinstance(item, dict):
            out = {}
            for key, child in item.items():
                if isinstance(key, str) and rng.random() < share / 4:
                    spoiled += 1
                    key = bad_string(style, rng)
                out[key] = walk(child)
            return out
        if isinstance(item, list):
            return [walk(child) for child in item]
        return item

    result = walk(value)
    if spoiled:
        return result
    if isinstance(result, dict):
        strings = [key for key, child in result.items() if isinstance(child, str)]
        if strings:
            result[rng.choice(strings)] = bad_string(style, rng)
        else:
            result[bad_string(style, rng)] = "fuzz"
        return result
    return {"fuzz": bad_string(style, rng)}


def encode(value: Any, style: str, rng: random.Random) -> tuple[bytes, str]:
    """(body, content type) carrying the spoiled strings as they are: escapes in JSON, raw bytes in JSON or msgpack,
    an overlong string in either."""
    if style == "overlong":
        style = rng.choice(("escape", "raw_msgpack"))
    if style == "escape":
        return json.dumps(value).encode(), JSON
    if style == "raw_json":
        return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogateescape"), JSON
    packed: bytes = msgpack.packb(value, use_bin_type=True, unicode_errors="surrogateescape")
    return packed, MSGPACK


def spoiled_body(value: Any, rng: random.Random) -> tuple[bytes, str, str]:
    """(body, content type, style) of `value` with some strings spoiled in a style drawn from `rng`."""
    style = rng.choice(STYLES)
    body, content_type = encode(spoil(value, style, rng), style, rng)
    return body, content_type, style
