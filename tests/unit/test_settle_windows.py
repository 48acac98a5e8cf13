"""The arithmetic of docs/operations.md "How long a request id is remembered"."""

from __future__ import annotations

from eru.settings import load_settings
from eru.store.settled_retention import settle_windows, windows_for


def test_the_windows_are_the_streams_ages_plus_redelivery() -> None:
    # the soak's stack: retention 300 s → deploy stream 300 s, dead letters 1,200 s; 5 × (30 s + 120 s) redelivery
    soak = windows_for(load_settings(retention_seconds=300), 5)
    assert soak.accepted_seconds == 300 + 5 * (30 + 120) == 1050
    assert soak.dead_lettered_seconds == 1200 + 1050 == 2250
    # the defaults: 7 days; dead letters 28 days (4 × retention, at most 30 days) — what migration 0070 starts with
    default = windows_for(load_settings(), 5)
    assert default.accepted_seconds == 7 * 86400 + 750 == 605_550
    assert default.dead_lettered_seconds == 28 * 86400 + 605_550 == 3_024_750
    # a 30-day retention: dead letters kept 30 days (the cap), the deploy stream 7 days (its own max age)
    month = windows_for(load_settings(retention_seconds=30 * 86400), 5)
    assert month.accepted_seconds == 605_550
    assert month.dead_lettered_seconds == 30 * 86400 + 605_550
    assert (
        settle_windows(
            deploy_stream_max_age=60, dead_letter_max_age=60, max_deliver=1, ack_wait_seconds=1, store_retry_seconds=0
        ).accepted_seconds
        == 61
    )
