"""Watermark configuration (docs/colocation.md): validation with errors naming the field, pod settings + node
overrides."""

from __future__ import annotations

import pytest
from coloc_builders import CONFIG

from eru.colocation.config import ColocationConfig, parse_config, resolve_config
from eru.errors import InvalidInput


def test_defaults_are_the_spec_defaults() -> None:
    config = parse_config(None)
    assert config == ColocationConfig()
    assert (config.satisfaction_lower, config.satisfaction_upper, config.batch_util_threshold) == (60, 80, 90)
    assert (config.window_seconds, config.cpu_cooldown_seconds, config.memory_cooldown_seconds) == (300, 20, 4)


def test_spec_example_is_valid_and_forbid_equal_to_suppress_is_allowed() -> None:
    config = parse_config(CONFIG)
    assert config.cpu_forbid == config.cpu_suppress == 65


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"cpu_suppress": 80}, "config.cpu_suppress", "cpu_evict (75) must be at least cpu_suppress (80)"),
        ({"cpu_forbid": 70}, "config.cpu_forbid", "cpu_suppress (65) must be at least cpu_forbid (70)"),
        ({"memory_forbid": 71}, "config.memory_forbid", "memory_evict (70) must be at least memory_forbid (71)"),
        ({"cpu_evict": 101}, "config.cpu_evict", "within 0..100"),
        ({"memory_evict": -1}, "config.memory_evict", "within 0..100"),
        ({"cpu_evict": 75.5}, "config.cpu_evict", "integer percentage"),
        ({"cpu_evict": True}, "config.cpu_evict", "integer percentage"),
        ({"satisfaction_lower": 90}, "config.satisfaction_lower", "at least satisfaction_lower"),
        ({"window_seconds": 0}, "config.window_seconds", "greater than 0"),
        ({"cpu_cooldown_seconds": -1}, "config.cpu_cooldown_seconds", "negative"),
        ({"metrics_interval_seconds": "5s"}, "config.metrics_interval_seconds", "number of seconds"),
        ({"cpu_evcit": 80}, "config.cpu_evcit", "unknown setting"),
    ],
)
def test_bad_configuration_names_the_field(changes: dict[str, object], field: str, words: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_config(CONFIG | changes)
    assert caught.value.field == field
    assert words in caught.value.message


def test_satisfaction_lower_above_upper_names_the_later_layer() -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_config(("pods.web", {"satisfaction_upper": 70}), ("nodes.n1", {"satisfaction_lower": 75}))
    assert caught.value.field in ("nodes.n1.satisfaction_lower", "pods.web.satisfaction_upper")


def test_node_override_wins_over_pod_settings() -> None:
    config = resolve_config(
        ("pods.web", {"cpu_forbid": 60, "cpu_suppress": 60, "cpu_evict": 70}), ("nodes.n1", {"cpu_evict": 85})
    )
    assert (config.cpu_forbid, config.cpu_suppress, config.cpu_evict) == (60, 60, 85)


def test_node_override_that_breaks_the_order_is_named_with_its_layer() -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_config(("pods.web", {"cpu_evict": 80}), ("nodes.n1", {"cpu_suppress": 90}))
    assert caught.value.field == "nodes.n1.cpu_suppress"


def test_pod_layer_that_breaks_the_order_is_named_with_its_layer() -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_config(("pods.web", {"cpu_evict": 50}), ("nodes.n1", {"window_seconds": 60}))
    assert caught.value.field == "pods.web.cpu_evict"


def test_a_layer_that_is_not_an_object_is_rejected() -> None:
    with pytest.raises(InvalidInput) as caught:
        resolve_config(("nodes.n1", [1, 2]))  # type: ignore[arg-type]
    assert caught.value.field == "nodes.n1"


def test_to_dict_round_trips() -> None:
    config = parse_config(CONFIG | {"forbid_hysteresis": 3})
    assert parse_config(config.to_dict()) == config
