"""One small wait shared by the allocator's paced loops (the intake's pace, the standby relay)."""

from __future__ import annotations

import asyncio


async def until_set(seconds: float, *events: asyncio.Event) -> None:
    """Wait `seconds`, or until one of `events` is set, whichever comes first."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
