"""Console login tokens: signed, expiring, spent once; sessions (docs/console.md)."""

from __future__ import annotations

import pytest

from eru.console.auth import Sessions, check_token, mint_token
from eru.errors import InvalidInput

SECRET = "s3cret"


def test_a_token_is_accepted_once_before_it_expires() -> None:
    sessions = Sessions(secret=SECRET)
    token = mint_token(SECRET, now=1000.0, ttl=600)
    session = sessions.login(token, now=1500.0)
    assert sessions.valid(session, now=1500.0)
    with pytest.raises(InvalidInput, match="already used"):
        sessions.login(token, now=1501.0)
    assert not sessions.valid("made-up", now=1500.0)
    assert not sessions.valid(None, now=1500.0)
    assert not sessions.valid(session, now=1500.0 + 13 * 3600)  # sessions last 12 hours


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("", "not a console login token"),
        ("a.b", "not a console login token"),
        ("nonce.soon.abc", "expiry of the token is not a number"),
        ("nonce.99999999999.0000", "wrong signature"),
    ],
)
def test_bad_tokens_name_the_field_and_reason(token: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as error:
        check_token(SECRET, token, now=0.0)
    assert error.value.field == "token"
    assert reason in error.value.message


def test_expired_and_foreign_tokens_are_refused() -> None:
    token = mint_token(SECRET, now=1000.0, ttl=10)
    with pytest.raises(InvalidInput, match="expired"):
        check_token(SECRET, token, now=1010.0)
    with pytest.raises(InvalidInput, match="wrong signature"):
        check_token("another console's secret", token, now=1001.0)
    with pytest.raises(InvalidInput, match="positive"):
        mint_token(SECRET, now=0.0, ttl=0)
