"""No password of a URL or DSN survives `redact_text`, nor a log line (eru.redaction, eru.logging)."""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr

import pytest
import structlog

from eru.logging import configure_logging
from eru.redaction import redact_text, redact_value

SECRET = "s3cr-et_Pw"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"nats://operator:{SECRET}@127.0.0.1:4222", "nats://operator:***@127.0.0.1:4222"),
        (f"postgresql://postgres:{SECRET}@127.0.0.1:5432/eru", "postgresql://postgres:***@127.0.0.1:5432/eru"),
        (f"cannot reach tls://u:{SECRET}@h:1 within 3s", "cannot reach tls://u:***@h:1 within 3s"),
        (f"host=127.0.0.1 password={SECRET} dbname=eru", "host=127.0.0.1 password=*** dbname=eru"),
        (f"PGPASSWORD={SECRET}", "PGPASSWORD=***"),
        (f'{{"password": "{SECRET}"}}', '{"password": "***"}'),
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("postgresql://postgres@127.0.0.1:5432/eru", "postgresql://postgres@127.0.0.1:5432/eru"),
        ("ratio 1:2 at 10:30", "ratio 1:2 at 10:30"),
    ],
)
def test_redact_text(text: str, shown: str) -> None:
    assert redact_text(text) == shown


def test_redact_value_walks_containers() -> None:
    value = {"urls": [f"nats://a:{SECRET}@h"], "n": 3, "t": (f"password={SECRET}",)}
    assert SECRET not in json.dumps(redact_value(value))


def test_no_log_line_carries_a_password_even_in_a_traceback() -> None:
    stream = io.StringIO()
    with redirect_stderr(stream):
        configure_logging("test", "r1", log_format="json", level="info")
        log = structlog.get_logger()
        log.info("service.starting", bus=f"nats://allocator:{SECRET}@127.0.0.1:4222")
        try:
            raise RuntimeError(f"connect to postgresql://eru:{SECRET}@db/eru failed")
        except RuntimeError:
            log.exception("boom")
    output = stream.getvalue()
    assert SECRET not in output
    assert "nats://allocator:***@127.0.0.1:4222" in output
    assert "postgresql://eru:***@db/eru" in output


@pytest.mark.timeout(20)  # a guard against the hang, not a measurement: before the fix this took minutes
@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"mode: unknown placement mode 'fuzz-{'x' * 300_000}' (known: auto)", None),  # a refusal quoting a value
        ("a1" * 150_000 + "://u:" + "p:" * 50_000, None),  # a scheme-like run without an end, no `@` after userinfo
        ("password=" + "x" * 300_000, "password=***"),
    ],
    ids=["long word", "long scheme and userinfo", "long keyword secret"],
)
def test_redact_text_is_linear_in_a_300k_character_text(text: str, shown: str | None) -> None:
    # The URL pattern's unbounded scheme `[A-Za-z0-9+.-]*` scanned to the end of the word from every position of
    # it: 28 s for a 100,000-character refusal, the allocator's event loop blocked while it logged the line.
    assert redact_text(text) == (shown or text)


def test_a_long_scheme_or_a_scheme_inside_a_word_is_still_redacted() -> None:
    assert redact_text(f"x{'y' * 100}nats://u:{SECRET}@h") == f"x{'y' * 100}nats://u:***@h"
    assert redact_text(f"1nats://u:{SECRET}@h") == "1nats://u:***@h"
