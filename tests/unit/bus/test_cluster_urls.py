"""A bus URL naming every server of a cluster (docs/deploy.md "The NATS cluster"): split, redacted, given each
user's credentials, validated; stream copies from the settings, raised but never lowered."""

from __future__ import annotations

import pytest
from nats.js import api
from pydantic import ValidationError

from eru.bus.access import make_account
from eru.bus.connection import default_inbox_prefix, redact, split_urls
from eru.bus.streams import _differs, default_streams, streams_for
from eru.settings import Settings

URLS = "nats://op:secret@127.0.0.1:4001, nats://op:secret@127.0.0.1:4002,nats://op:secret@127.0.0.1:4003"


def test_split_redact_and_inbox_of_several_urls() -> None:
    assert split_urls(URLS) == [
        "nats://op:secret@127.0.0.1:4001",
        "nats://op:secret@127.0.0.1:4002",
        "nats://op:secret@127.0.0.1:4003",
    ]
    shown = redact(URLS)
    assert "secret" not in shown
    assert shown.count("op:***@127.0.0.1:400") == 3
    assert default_inbox_prefix(URLS) == "_INBOX_op"


def test_an_account_puts_its_credentials_in_every_url() -> None:
    account = make_account("allocator", "allocator", "pw")
    url = account.url("nats://127.0.0.1:4001,nats://127.0.0.1:4002")
    assert url == "nats://allocator:pw@127.0.0.1:4001,nats://allocator:pw@127.0.0.1:4002"


def test_settings_take_several_urls_and_name_the_bad_one() -> None:
    settings = Settings.model_validate({"bus": {"url": URLS, "stream_replicas": 3}})
    assert settings.bus.url.count(",") == 2
    assert {spec.replicas for spec in streams_for(settings)} == {3}
    with pytest.raises(ValidationError, match="http://x"):
        Settings.model_validate({"bus": {"url": "nats://127.0.0.1:1,http://x"}})
    with pytest.raises(ValidationError, match="stream_replicas"):
        Settings.model_validate({"bus": {"stream_replicas": 0}})


def test_copies_are_raised_but_never_lowered() -> None:
    (one,) = [spec for spec in default_streams() if spec.name == "ERU_DEPLOY"]
    (three,) = [spec for spec in default_streams(replicas=3) if spec.name == "ERU_DEPLOY"]
    assert _differs(three.config(), one.config())  # R1 → R3: updated
    assert not _differs(one.config(), three.config())  # a process without the setting leaves R3 alone
    assert not _differs(three.config(), three.config())
    assert isinstance(three.config(), api.StreamConfig)
