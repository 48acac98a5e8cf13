"""The event loop a service runs on (`ERU_EVENT_LOOP`, docs/performance.md "The event loop"): CPython's asyncio loop
by default, uvloop's when asked, anything else refused naming the setting."""

from __future__ import annotations

import asyncio

import pytest
import uvloop

from eru.errors import InvalidInput
from eru.service import loop_runner
from eru.settings import load_settings


def _loop_type(event_loop: str) -> type[asyncio.AbstractEventLoop]:
    seen: list[type[asyncio.AbstractEventLoop]] = []

    async def record() -> None:
        seen.append(type(asyncio.get_running_loop()))

    loop_runner(event_loop)(record())
    assert len(seen) == 1
    return seen[0]


def test_services_run_on_the_asyncio_loop_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ERU_EVENT_LOOP", raising=False)
    settings = load_settings()
    assert settings.event_loop == "asyncio"
    assert not issubclass(_loop_type(settings.event_loop), uvloop.Loop)


def test_uvloop_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERU_EVENT_LOOP", "uvloop")
    assert _loop_type(load_settings().event_loop) is uvloop.Loop


def test_an_unknown_event_loop_is_refused_naming_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ERU_EVENT_LOOP", "trio")
    with pytest.raises(InvalidInput) as raised:
        load_settings()
    assert "ERU_EVENT_LOOP" in raised.value.message
