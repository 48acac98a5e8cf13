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
