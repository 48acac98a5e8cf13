"""Rolling replace's rules (eru.rollout, docs/cli.md "Rolling replace") and the sim's failing image."""

from __future__ import annotations

import pytest

from eru.nodeagent.health import fails_health
from eru.rollout import images_running, to_replace, verdict, waves


def test_waves_of_at_most_max_parallel_in_order() -> None:
    assert waves(["a", "b", "c"], 2) == [["a", "b"], ["c"]]
    assert waves(["a", "b", "c"], 1) == [["a"], ["b"], ["c"]]
    assert waves(["a"], 5) == [["a"]]
    with pytest.raises(ValueError, match="at least 1"):
        waves(["a"], 0)


def test_only_running_instances_not_on_the_image_yet_by_node() -> None:
    rows = [
        {"id": "c3", "workload": "app", "node": "n2", "state": "running", "image": "app:1"},
        {"id": "c1", "workload": "app", "node": "n1", "state": "running", "image": "app:1"},
        {"id": "c2", "workload": "app", "node": "n1", "state": "running", "image": "app:2"},  # done already
        {"id": "c4", "workload": "app", "node": "n1", "state": "failed", "image": "app:1"},
        {"id": "c5", "workload": "other", "node": "n1", "state": "running", "image": "app:1"},
        {"id": "c6", "workload": "app", "node": "n1", "state": "planned", "image": "app:2", "replaces": "c1"},
    ]
    assert [r["id"] for r in to_replace(rows, "app", "app:2")] == ["c1", "c3"]
    assert images_running(rows, "app") == {"app:1": ["c1", "c3"], "app:2": ["c2"]}


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (None, "pending"),
        ({"state": "planned", "replaces": "old"}, "pending"),
        ({"state": "creating", "replaces": "old", "health": "unhealthy"}, "pending"),  # the agent decides
        ({"state": "failed", "replaces": "old"}, "failed"),  # rolled back by the agent
        ({"state": "running", "replaces": None, "health": "starting"}, "ok"),
        ({"state": "running", "replaces": None, "health": None}, "ok"),
        ({"state": "running", "replaces": None, "health": "unhealthy"}, "failed"),
    ],
)
def test_a_new_containers_verdict(row: dict[str, str | None] | None, expected: str) -> None:
    assert verdict(row) == expected


def test_the_sims_unhealthy_label_fails_every_check_or_those_of_some_images() -> None:
    assert fails_health("true", "app:1")
    assert fails_health("app:bad, app:worse", "app:worse")
    assert not fails_health("app:bad", "app:2")
    assert not fails_health(None, "app:1")
    assert not fails_health("", "app:1")
