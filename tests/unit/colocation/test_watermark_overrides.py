"""Watermarks as live configuration (docs/colocation.md "Watermarks set live"): the CLI items, a change applied to
an override, validation naming the field and the rule, and the precedence node > pod > environment."""

from __future__ import annotations

import pytest

from eru.colocation.overrides import apply_change, check_override, effective_config, parse_watermark_items
from eru.errors import InvalidInput

ENVIRONMENT = {
    "watermarks": {"cpu_forbid": 45, "cpu_suppress": 60, "cpu_evict": 80},
    "pods": {"p1": {"cpu_evict": 85}},
    "nodes": {},
}


def test_items_set_and_clear() -> None:
    assert parse_watermark_items(["cpu_suppress=50", "cpu_evict-", "memory_evict=75%"]) == (
        {"cpu_suppress": 50, "memory_evict": 75},
        ["cpu_evict"],
    )


@pytest.mark.parametrize(
    ("items", "field", "reason"),
    [
        (["cpu_supress=50"], "--watermark cpu_supress", "unknown watermark 'cpu_supress'"),
        (["cpu_evict=101"], "--watermark cpu_evict", "percentage must be within 0..100, got 101"),
        (["cpu_evict=-1"], "--watermark cpu_evict", "percentage must be within 0..100, got -1"),
        (["cpu_evict=high"], "--watermark cpu_evict", "expected an integer percentage 0..100, got 'high'"),
        (["cpu_evict"], "--watermark", "expected key=percent or key- (to clear), got 'cpu_evict'"),
        (["window_seconds=10"], "--watermark window_seconds", "unknown watermark 'window_seconds'"),
        (["cpu_evict=70", "cpu_evict-"], "--watermark cpu_evict", "both set and cleared"),
    ],
)
def test_bad_items_name_the_field_and_the_rule(items: list[str], field: str, reason: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_watermark_items(items)
    assert caught.value.field == field
    assert reason in caught.value.reason


def test_a_change_sets_clears_and_clears_all() -> None:
    current = {"cpu_evict": 70, "cpu_suppress": 50}
    assert apply_change(current, {"memory_evict": 75}, ["cpu_evict"]) == {"cpu_suppress": 50, "memory_evict": 75}
    assert apply_change(current, {"cpu_forbid": 40}, [], clear_all=True) == {"cpu_forbid": 40}
    assert current == {"cpu_evict": 70, "cpu_suppress": 50}  # never changed in place


def test_precedence_node_over_pod_over_environment() -> None:
    env_only = effective_config(ENVIRONMENT, "n1", "p1", None, None)
    assert (env_only.cpu_suppress, env_only.cpu_evict) == (60, 85)  # environment: pods.p1 over watermarks
    pod = effective_config(ENVIRONMENT, "n1", "p1", {"cpu_evict": 75, "cpu_suppress": 55}, None)
    assert (pod.cpu_suppress, pod.cpu_evict) == (55, 75)
    node = effective_config(ENVIRONMENT, "n1", "p1", {"cpu_evict": 75, "cpu_suppress": 55}, {"cpu_suppress": 50})
    assert (node.cpu_suppress, node.cpu_evict) == (50, 75)  # the node's key wins, the pod's other key stays
    assert node.memory_evict == 70  # untouched keys: the defaults


def test_inconsistent_layers_name_the_layer_and_the_rule() -> None:
    with pytest.raises(InvalidInput) as caught:
        effective_config(ENVIRONMENT, "n1", "p1", {"cpu_evict": 70}, {"cpu_suppress": 75})
    assert caught.value.field == "node.n1.cpu_suppress"
    assert "cpu_evict (70) must be at least cpu_suppress (75)" in caught.value.reason
    assert "evict ≥ suppress ≥ forbid" in caught.value.reason
    with pytest.raises(InvalidInput) as forbid:
        effective_config(ENVIRONMENT, "n1", "p1", {"cpu_forbid": 70}, None)  # suppress 60 < forbid 70
    assert forbid.value.field == "pod.p1.cpu_forbid"
    with pytest.raises(InvalidInput) as zero:
        effective_config(ENVIRONMENT, "n1", "p1", None, {"satisfaction_lower": 0})
    assert zero.value.field == "node.n1.satisfaction_lower"


def test_stored_override_is_checked_again() -> None:
    assert check_override({"cpu_evict": 70}, "set") == {"cpu_evict": 70}
    with pytest.raises(InvalidInput) as caught:
        check_override({"cpu_evict": 170}, "set")
    assert caught.value.field == "set.cpu_evict"


def test_environment_watermarks_resolve_the_defaults_and_keep_the_live_layers_only() -> None:
    from eru.colocation.overrides import environment_watermarks

    layers = environment_watermarks(
        {"watermarks": {"cpu_evict": 80}, "pods": {"p1": {"cpu_suppress": 70, "window_seconds": 60}, "p2": {}}}
    )
    assert layers["defaults"]["cpu_evict"] == 80
    assert layers["defaults"]["cpu_forbid"] == 65  # the built-in default
    assert "window_seconds" not in layers["defaults"]  # not live: no override can change it
    assert layers["pods"] == {"p1": {"cpu_suppress": 70}}
    assert layers["nodes"] == {}
