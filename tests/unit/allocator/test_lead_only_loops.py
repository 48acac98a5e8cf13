"""The keeper and the housekeeping sweep run on the lead replica only (docs/replicas.md "One replica relays"): with
three replicas each ran its own round every interval, three times the work on PostgreSQL. A replica that does not
lead skips its rounds; one that leads (or a lone allocator, `active=None`) runs them."""

from __future__ import annotations

import asyncio
from typing import Any

from eru.colocation.backoff import KeepConfig
from eru.settings import Settings
from eru_allocator.containers.events import EventContext
from eru_allocator.containers.keep_count import Keeper
from eru_allocator.containers.sweeper import sweep
from eru_allocator.store.container_store import PgContainerEvents
from eru_allocator.store.delivery_store import PgDelivery
from eru_allocator.store.kept_store import PgKeptInstances
from eru_allocator.store.node_store import PgNodes


class CountingPool:
    """A pool that counts what was asked of it and fails each time (a round then logs and goes on)."""

    def __init__(self) -> None:
        self.asked = 0

    def acquire(self) -> Any:
        self.asked += 1
        raise RuntimeError("no database here")

    async def fetch(self, *_args: Any) -> Any:
        self.asked += 1
        raise RuntimeError("no database here")


async def _run_for(loop_of: Any, leading: list[bool], seconds: float = 0.3) -> None:
    stopping = asyncio.Event()
    task = asyncio.create_task(loop_of(stopping, lambda: leading[0]))
    await asyncio.sleep(seconds)
    stopping.set()
    await asyncio.wait_for(task, timeout=5)


async def test_the_keeper_runs_rounds_only_while_leading() -> None:
    pool = CountingPool()
    keeper = Keeper(PgKeptInstances(pool), "allocator/test", KeepConfig())  # type: ignore[arg-type]
    leading = [False]
    await _run_for(lambda stop, active: keeper.run(stop, 0.02, active), leading)
    assert pool.asked == 0
    leading[0] = True
    await _run_for(lambda stop, active: keeper.run(stop, 0.02, active), leading)
    assert pool.asked > 0


async def test_the_sweep_runs_only_while_leading() -> None:
    pool = CountingPool()
    ctx = EventContext("allocator/test", PgContainerEvents(pool), PgNodes(pool))  # type: ignore[arg-type]
    delivery = PgDelivery(pool)  # type: ignore[arg-type]
    settings = Settings.model_validate({"allocator": {"sweep_interval_seconds": 0.02}})
    leading = [False]
    await _run_for(lambda stop, active: sweep(ctx, settings, stop, 5, delivery, active), leading)
    assert pool.asked == 0
    leading[0] = True
    await _run_for(lambda stop, active: sweep(ctx, settings, stop, 5, delivery, active), leading)
    assert pool.asked > 0
