"""Secrets out of text: passwords in URLs and DSNs are replaced by `***` before anything is logged or shown.

`redact_text` is applied to every value of every log line (`eru.logging`) and to every error line the CLI prints,
so a URL with credentials (`nats://user:secret@host`, `postgresql://eru:secret@host/db`) or a libpq keyword DSN
(`password=secret`) can be passed around freely without ending up in a log file or a terminal (docs/security.md).
"""

from __future__ import annotations

import re
from collections.abc import MutableMapping
from typing import Any

# scheme://user:password@ — the password is anything up to the '@' that ends the userinfo (no '/', no space). Linear
# in the text: a scheme is at most 64 characters and nothing backtracks (possessive `+`), so a 100,000-character word
# costs 64 steps per character instead of one per character *per position* (an unbounded `[A-Za-z0-9+.-]*` took 28 s
# over a 100,000-character refusal, and the allocator answered nothing meanwhile).
_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]{0,63}+://[^\s:/@'\"]*+:)(?P<secret>[^\s/@'\"]++)(?=@)")
# password=secret / PGPASSWORD=secret / "password": "secret" (libpq keyword DSNs, environments, JSON)
_KEYWORD_PASSWORD = re.compile(
    r"(?P<head>(?i:\b(?:pg)?password|\bpasswd)['\"]?\s*[=:]\s*['\"]?)(?P<secret>[^\s'\",;&}]+)"
)
MASK = "***"


def redact_text(text: str) -> str:
    """`text` with every password of a URL or a `password=` / `"password": …` pair replaced by `***`."""
    if ":" not in text and "=" not in text:
        return text
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    return _KEYWORD_PASSWORD.sub(lambda m: m.group("head") + MASK, text)


def redact_value(value: Any, depth: int = 0) -> Any:
    """`redact_text` through strings, lists, tuples and dicts (a log line's values), at most 8 levels deep."""
    if isinstance(value, str):
        return redact_text(value)
    if depth >= 8:
        return value
    if isinstance(value, dict):
        return {key: redact_value(item, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact_value(item, depth + 1) for item in value)
    return value


def redact_event(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    """structlog processor: every value of the log line through `redact_value`."""
    return {key: redact_value(value) for key, value in event.items()}
