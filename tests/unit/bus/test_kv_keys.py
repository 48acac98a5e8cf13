"""The server-side key listing's own rules (`eru.bus.kv_keys`, docs/replicas.md "Listing the heartbeats"), over a
stand-in for the stream info answer: keys named without the bucket's subject prefix, sorted, an empty bucket an
empty list, and an answer at the server's page size refused rather than taken as the whole bucket."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from eru.bus.kv_keys import MAX_SUBJECT_DETAILS, KeyListingTooLong, kv_keys


class StreamInfo:
    def __init__(self, subjects: dict[str, int] | None) -> None:
        self.subjects = subjects
        self.asked: list[tuple[str, str]] = []

    async def stream_info(self, name: str, subjects_filter: str) -> SimpleNamespace:
        self.asked.append((name, subjects_filter))
        return SimpleNamespace(state=SimpleNamespace(subjects=self.subjects))


async def test_keys_are_named_without_the_subject_prefix_and_sorted() -> None:
    js = StreamInfo({"$KV.leases.replicas.b": 1, "$KV.leases.replicas.a": 1})
    assert await kv_keys(js, "leases", "replicas.") == ["replicas.a", "replicas.b"]  # type: ignore[arg-type]
    assert js.asked == [("KV_leases", "$KV.leases.replicas.>")]
    await kv_keys(js, "leases")  # type: ignore[arg-type]
    assert js.asked[-1] == ("KV_leases", "$KV.leases.>")


async def test_no_subject_is_no_key() -> None:
    assert await kv_keys(StreamInfo(None), "leases") == []  # type: ignore[arg-type]


async def test_a_listing_the_server_would_page_is_refused_naming_the_bucket() -> None:
    js = StreamInfo({f"$KV.budgets.w{i}": 1 for i in range(MAX_SUBJECT_DETAILS)})
    with pytest.raises(KeyListingTooLong, match="bucket budgets: 100000"):
        await kv_keys(js, "budgets")  # type: ignore[arg-type]
