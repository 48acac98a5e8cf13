"""Pages of list queries: keyset cursors and a byte budget per page (docs/bus.md, paging).

A cursor is the sort key of the last row of the previous page, as URL-safe base64 of a JSON list, so a page is one
indexed range scan whatever its depth and a row inserted meanwhile is neither skipped nor repeated. A page holds at
most `limit` rows and at most `PAGE_BYTES` of encoded rows, so no reply can exceed the bus's max payload.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from typing import Any

from eru.errors import InvalidInput

PAGE_BYTES = (
    512 * 1024
)  # half of nats-server's default max_payload (1 MiB): room for the envelope and msgpack's framing


def encode_cursor(key: Sequence[Any]) -> str:
    """The cursor that continues after the row whose sort key is `key`."""
    return base64.urlsafe_b64encode(json.dumps(list(key), separators=(",", ":")).encode()).decode()


def decode_cursor(cursor: str | None, arity: int) -> list[Any] | None:
    """The sort key inside `cursor` (None for the first page); a malformed cursor is an error naming `cursor`."""
    if cursor is None:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (binascii.Error, ValueError, UnicodeError) as error:
        raise InvalidInput("cursor", "not a cursor from a previous page of this query") from error
    if not isinstance(key, list) or len(key) != arity or not all(isinstance(part, str) for part in key):
        raise InvalidInput("cursor", "not a cursor from a previous page of this query")
    return key


def fit_page(
    rows: list[dict[str, Any]], limit: int, key_of: Callable[[dict[str, Any]], Sequence[Any]]
) -> tuple[list[dict[str, Any]], str | None]:
    """The rows that fit one page and the cursor of the next (None when `rows` held no more than `limit`).

    `rows` is what the database returned for `limit + 1` rows: the extra row only tells that more exist.
    """
    more = len(rows) > limit
    kept: list[dict[str, Any]] = []
    size = 0
    for row in rows[:limit]:
        size += len(json.dumps(row, separators=(",", ":"), default=str))
        if kept and size > PAGE_BYTES:
            more = True
            break
        kept.append(row)
    return kept, encode_cursor(key_of(kept[-1])) if more and kept else None
