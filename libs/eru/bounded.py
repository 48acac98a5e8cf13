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
_LEAVES = frozenset({str, int, float, bool, type(None), bytes})
_LONG = 32  # a collection longer than this is first checked for leaves only by the types of its items, in C
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
        add = below.append
        for item in level:
            if len(item) > max_length:
                _refuse(value, limits)
            children = item.values() if isinstance(item, dict) else item
            if len(item) > _LONG and _LEAVES.issuperset(map(type, children)):
                continue  # a long list of leaves (a column of numbers or names): one pass in C, nothing below it
            for child in children:
                # the exact type first: a decoded body is mostly leaves, and `type() in set` costs a third of
                # `isinstance` with a tuple (50 containers a node: about a thousand values per metrics sample)
                kind = type(child)
                if kind is dict or kind is list or (kind not in _LEAVES and isinstance(child, _CONTAINERS)):
                    add(child)
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


# ---------- text that cannot be encoded (lone surrogates) ----------
# A Python str may hold a lone surrogate (U+D800-U+DFFF): JSON's `"\ud800"` escape decodes to one, and so does an
# undecodable byte of a command-line argument (surrogateescape). No such string can be written as UTF-8 — not to a
# terminal, msgpack, PostgreSQL or a log — so every input path refuses it where it is read, naming the field.
_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]")


def unencodable(text: str) -> str | None:
    """Why `text` cannot be written as UTF-8 (its first lone surrogate and where), or None when it can."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        code = ord(text[error.start])
        origin = f"an undecodable byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "a broken \\u escape"
        return f"not UTF-8 text: a lone surrogate U+{code:04X} at character {error.start} ({origin})"
    return None


def find_unencodable(value: Any) -> tuple[str, str] | None:
    """The path of the first string (map key or value) in a decoded value that cannot be written as UTF-8, with the
    reason; None when every string can."""
    stack: list[tuple[Any, Trail]] = [(value, None)]
    while stack:
        item, trail = stack.pop()
        if isinstance(item, str):
            reason = unencodable(item)
            if reason is not None:
                return _path(trail) or BODY_FIELD, reason
        elif isinstance(item, dict):
            for key, child in reversed(item.items()):
                if isinstance(key, str) and (reason := unencodable(key)) is not None:
                    where = _path(trail)
                    return where or BODY_FIELD, f"a key {reason}"
                stack.append((child, (trail, key)))
        elif isinstance(item, list):
            stack.extend((child, (trail, index)) for index, child in reversed(list(enumerate(item))))
    return None


def check_json_text(data: bytes, value: Any, field: str | None = None) -> None:
    """Refuse a decoded JSON `value` holding a string that cannot be written as UTF-8 (only a `\\uD8xx`-style escape
    in `data` can make one, so bodies without one are not walked): `InvalidInput` naming the string's path."""
    if _SURROGATE_ESCAPE.search(data) is None:
        return
    found = find_unencodable(value)
    if found is not None:
        path, reason = found
        raise InvalidInput(f"{field}.{path}" if field and path != BODY_FIELD else (field or path), reason)


def clip(text: str, keep: int = 40) -> str:
    """`text` for an error message or a table cell: whole when short, else its first `keep` characters and its length
    (`busyboxxxx… (307 characters)`), so that no message or cell echoes a 120 KB value; never a lone surrogate."""
    shown = text if len(text) <= keep + 20 else f"{text[:keep]}… ({len(text):,} characters)"
    return shown if unencodable(shown) is None else shown.encode("utf-8", "backslashreplace").decode("utf-8")
