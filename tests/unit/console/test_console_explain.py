"""The console's explain endpoint (`/api/explain/<id>`, docs/console.md): an eviction decision of the feed explained
by the same pure function as `eru explain`, and an unknown id a clear error naming the field."""

from __future__ import annotations

import pytest
from tests.unit.colocation.coloc_builders import problem

from eru.console.backend import Backend
from eru.console.feed import Feed
from eru.decision_view import explain_eviction_event
from eru.errors import InvalidInput


async def test_explain_endpoint_answers_the_window_and_each_container() -> None:
    feed = Feed()
    body = {
        "decision_id": "n1-1000000-evict",
        "node": "n1",
        "time": 1000.0,
        "kind": "evict",
        "reason": "cpu-satisfaction",
        "victims": [{"container_id": "b1"}, {"container_id": "b2"}],
        "input": problem(),
    }
    feed.eviction_bodies["n1-1000000-evict"] = body
    answer = await Backend(None, feed).explain("n1-1000000-evict")
    assert answer["decision_id"] == "n1-1000000-evict"
    assert answer["same"] is True
    assert answer["window"]["watermarks"]["cpu_evict"] == 75
    assert {row["id"]: row["chosen"] for row in answer["containers"]} == {"b1": True, "b2": True, "b3": False}
    assert answer == {"decision_id": "n1-1000000-evict", **explain_eviction_event(body)}
    body["victims"] = [{"container_id": "b3"}]  # a record the recomputation does not reproduce is flagged
    assert (await Backend(None, feed).explain("n1-1000000-evict"))["same"] is False


async def test_an_unknown_eviction_decision_names_the_field() -> None:
    with pytest.raises(InvalidInput) as caught:
        await Backend(None, Feed()).explain("n9-1-evict")
    assert caught.value.field == "decision_id"
    assert "unknown eviction decision 'n9-1-evict'" in caught.value.message
