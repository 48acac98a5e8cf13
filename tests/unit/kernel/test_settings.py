"""Settings: environment with ERU_ prefix and __ nesting, a config file, one-line errors naming the setting."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eru.errors import InvalidInput
from eru.settings import load_settings


def test_environment_nests_with_double_underscore(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERU_BUS__URL", "nats://10.1.2.3:4333")
    monkeypatch.setenv("ERU_PLANNING__SHARE_BASE", "1000")
    settings = load_settings()
    assert settings.bus.url == "nats://10.1.2.3:4333"
    assert settings.planning.share_base == 1000


def test_config_file_is_read_and_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "eru.toml"
    config.write_text('log_level = "debug"\n[store]\ndsn = "postgresql://u@db/eru"\npool_max = 4\n')
    monkeypatch.setenv("ERU_STORE__POOL_MAX", "7")
    settings = load_settings(config)
    assert settings.log_level == "debug"
    assert settings.store.dsn == "postgresql://u@db/eru"
    assert settings.store.pool_max == 7


@pytest.mark.parametrize(
    ("variable", "value", "field", "reason"),
    [
        ("ERU_BUS__URL", "http://localhost:4222", "bus.url", "nats://"),
        ("ERU_STORE__POOL_MAX", "many", "store.pool_max", "integer"),
        ("ERU_PLANNING__SHARE_BASE", "0", "planning.share_base", "greater than 0"),
        ("ERU_LOG_LEVEL", "loud", "log_level", "'debug'"),
        ("ERU_NODE_AGENT__NODE", "bad.node", "node_agent.node", "pattern"),
        # a hold past JetStream's 120 s duplicate window could store a dead replica's message twice
        ("ERU_ALLOCATOR__OUTBOX_HOLD_SECONDS", "300", "allocator.outbox_hold_seconds", "less than or equal to 60"),
        ("ERU_ALLOCATOR__OUTBOX_HOLD_SECONDS", "-1", "allocator.outbox_hold_seconds", "greater than or equal to 0"),
    ],
)
def test_a_bad_value_names_the_setting_and_its_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, field: str, reason: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(InvalidInput) as caught:
        load_settings()
    message = caught.value.message
    assert message.startswith(f"{field} (env {variable})")
    assert reason in message
    assert "\n" not in message


def test_an_unknown_setting_in_the_file_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "eru.json"
    config.write_text(json.dumps({"bus": {"ulr": "nats://x:1"}}))
    with pytest.raises(InvalidInput) as caught:
        load_settings(config)
    assert caught.value.field.startswith("bus.ulr")


@pytest.mark.parametrize(
    ("content", "suffix", "reason"),
    [("not = [toml", ".toml", "not valid toml"), ("[1, 2]", ".json", "top level"), ("{", ".json", "not valid json")],
)
def test_an_unreadable_config_file_is_one_clear_error(tmp_path: Path, content: str, suffix: str, reason: str) -> None:
    config = tmp_path / f"eru{suffix}"
    config.write_text(content)
    with pytest.raises(InvalidInput) as caught:
        load_settings(config)
    assert caught.value.field == "config_file"
    assert reason in caught.value.reason


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="cannot read"):
        load_settings(tmp_path / "absent.toml")


def test_sizes_read_as_people_write_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """ERU_LOG_MAX_BYTES and ERU_STREAM_MAX_BYTES are byte sizes; `10MiB` (what the soak passes) means 10 MiB."""
    monkeypatch.setenv("ERU_LOG_MAX_BYTES", "10MiB")
    monkeypatch.setenv("ERU_STREAM_MAX_BYTES", '{"ERU_NODE": "1GiB", "ERU_EVENTS": 3000000}')
    settings = load_settings()
    assert settings.log_max_bytes == 10 * 1024**2
    assert settings.stream_max_bytes == {"ERU_NODE": 1024**3, "ERU_EVENTS": 3_000_000}


@pytest.mark.parametrize(
    ("name", "value", "field", "reason"),
    [
        ("ERU_STREAM_MAX_BYTES", "notjson", "stream_max_bytes (env ERU_STREAM_MAX_BYTES)", "not valid JSON"),
        ("ERU_STREAM_MAX_BYTES", '{"ERU_NODE": "lots"}', "stream_max_bytes", "cannot read 'lots' as bytes"),
        ("ERU_STREAM_MAX_BYTES", '{"ERU_NODE": "5"}', "stream_max_bytes", "at least 1 MiB"),
        ("ERU_LOG_MAX_BYTES", "10XB", "log_max_bytes (env ERU_LOG_MAX_BYTES)", "unknown unit 'XB'"),
        ("ERU_LOG_MAX_BYTES", "10", "log_max_bytes (env ERU_LOG_MAX_BYTES)", "at least 64 KiB"),
    ],
)
def test_a_bad_size_or_json_names_the_setting(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, field: str, reason: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(InvalidInput) as caught:
        load_settings()
    assert caught.value.field.startswith(field)
    assert reason in caught.value.reason
