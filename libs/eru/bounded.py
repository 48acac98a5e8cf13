"""Bounded JSON/msgpack values (docs/bus.md "Bounded decoding"): limits on size, nesting depth and collection length,
and the checks behind them. Pure and dependency-free, so the bus codec and `eru plan` share them (the CLI must not
import the bus to read a problem file)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NoReturn

from eru.errors import InvalidInput

BODY_FIELD = "body"


@dataclass(frozen=True)
class DecodeLimits:
    """How big a body may be (settings `bus.max_body_bytes`, `bus.max_depth`, `bus.max_collection_length`)."""

    max_body_bytes: int = 1 << 20
    max_depth: int = 64
    max_collection_length: int = 100_000


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(rb"[^\[\]{}]")
_OPENERS = frozenset(b"[{")


def check_json_depth(data: bytes, max_depth: int) -> None:
    """Refuse JSON nesting deeper than `max_depth` before `json.loads` (which recurses once per level)."""
    if data.count(b"[") + data.count(b"{") <= max_depth:
        return  # cannot be deeper than the number of openers
    depth = 0
    for byte in _NOT_BRACKET.sub(b"", _JSON_STRING.sub(b"", data)):
        if byte in _OPENERS:
            depth += 1
            if depth > max_depth:
                raise InvalidInput(BODY_FIELD, f"nested deeper than {max_depth} levels (limit bus.max_depth)")
        else:
            depth -= 1


def _short(path: str, limit: int = 60) -> str:
    return path if len(path) <= limit else "…" + path[-limit:]


_CONTAINERS = (dict, list)
Trail = tuple[Any, Any] | None  # (parent trail, key): a path built as a string only when it is reported


def _path(trail: Trail) -> str:
    keys: list[Any] = []
    while trail is not None:
        trail, key = trail
        keys.append(key)
    path = ""
    for key in reversed(keys):
        path = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))
    return path


def check_shape(value: Any, limits: DecodeLimits) -> None:
    """Refuse a decoded value nesting deeper than `max_depth` or with a list/map longer than `max_collection_length`
    (`InvalidInput` on `body`, the reason naming where and which limit).

    Every body a service receives passes here: the walk goes level by level without recording where it is, and only
    a value that breaks a limit is walked again (`_refuse`) to name the place."""
    if not isinstance(value, dict | list):
        return
    max_depth, max_length = limits.max_depth, limits.max_collection_length
    level: list[Any] = [value]
    depth = 1
    while level:
        if depth > max_depth:
            _refuse(value, limits)
        below: list[Any] = []
        for item in level:
            if len(item) > max_length:
                _refuse(value, limits)
            for child in item.values() if isinstance(item, dict) else item:
                if isinstance(child, _CONTAINERS):
                    below.append(child)
        level = below
        depth += 1


def _refuse(value: Any, limits: DecodeLimits) -> NoReturn:
    """Find the first place `value` breaks a limit and raise naming it (the slow walk, for refused bodies only)."""
    max_depth, max_length = limits.max_depth, limits.max_collection_length
    stack: list[tuple[Any, int, Trail]] = [(value, 1, None)]
    while stack:
        item, depth, trail = stack.pop()
        if depth > max_depth:
            where = _short(_path(trail)) or "the top"
            raise InvalidInput(BODY_FIELD, f"nested deeper than {max_depth} levels at {where} (limit bus.max_depth)")
        if len(item) > max_length:
            raise InvalidInput(
                BODY_FIELD,
                f"{_path(trail) or 'the top level'} holds {len(item)} items, above {max_length} "
                "(limit bus.max_collection_length)",
            )
        children = item.items() if isinstance(item, dict) else enumerate(item)
        for key, child in children:
            if isinstance(child, _CONTAINERS):
                stack.append((child, depth + 1, (trail, key)))
    raise InvalidInput(BODY_FIELD, "breaks a decoding limit")  # not reached: check_shape found a place
