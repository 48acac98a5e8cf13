"""The event loop a service runs on (`ERU_EVENT_LOOP`, docs/performance.md "The event loop"): uvloop's by default,
CPython's asyncio loop when asked, anything else refused naming the setting."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from eru.errors import InvalidInput
from eru.service import loop_runner
from eru.settings import load_settings


async def _loop_type() -> type[asyncio.AbstractEventLoop]:
    return type(asyncio.get_running_loop())


def test_services_run_on_uvloop_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ERU_EVENT_LOOP", raising=False)
    settings = load_settings()
    assert settings.event_loop == "uvloop"
    seen: list[type[asyncio.AbstractEventLoop]] = []

    async def record() -> None:
        seen.append(await _loop_type())

    loop_runner(settings.event_loop)(record())
    assert seen == [uvloop.Loop]


def test_the_asyncio_loop_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERU_EVENT_LOOP", "asyncio")
    seen: list[type[asyncio.AbstractEventLoop]] = []

    async def record() -> None:
        seen.append(await _loop_type())

    loop_runner(load_settings().event_loop)(record())
    assert len(seen) == 1
    assert not issubclass(seen[0], uvloop.Loop)


def test_an_unknown_event_loop_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERU_EVENT_LOOP", "trio")
    with pytest.raises(InvalidInput) as raised:
        load_settings()
    assert "ERU_EVENT_LOOP" in raised.value.message
