"""The eviction service end to end against a real nats-server: NodeMetrics in, commands, events, conditions out."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from eviction_helpers import GIB, collect, metrics, send, start_replica

from eru.bus import new_envelope, publish
from eru.colocation.plan_kind import solve_evict
from eru.errors import InvalidInput

pytestmark = pytest.mark.timeout(60)

# forbid 60 %, suppress = evict = 70 % of 32 cores (22.4): a suppressed node sits on the evict line when batch is
# starved, which is when the satisfaction rule should pick victims.
CPU_WATERMARKS: dict[str, Any] = {"cpu_forbid": 60, "cpu_suppress": 70, "cpu_evict": 70, "suppress_dwell_seconds": 0}


async def test_suppress_then_evict_the_right_batch_containers_then_lift(nats_url: str, nc: Any, js: Any) -> None:
    found = await collect(nc)
    replica = await start_replica(nats_url, "r1", nodes={"n1": CPU_WATERMARKS})
    try:
        batch = {"b0": 2.0, "b1": 2.0, "b2": 2.0}
        # 1. prod + system use 18 cores, batch 6: 24 cores = 75 % ≥ 70 % → suppress batch to 22.4 - 18 = 4.4 cores.
        await send(js, metrics("n1", time.time(), node_cpu=24.0, batch=batch))
        await found.wait_for(lambda f: any(e.kind == "suppress" for e in f.events))
        # the condition is published after the commands and the event (eru_eviction.handlers): wait for it too
        await found.wait_for(lambda f: any(c.forbid_schedule_cpu for c in f.conditions))
        updates = [c for c in found.commands if c.kind == "suppress"]
        assert sorted(c.container_id for c in updates) == ["b0", "b1", "b2"]
        assert all(c.cpu_quota is not None for c in updates)
        assert sum(c.cpu_quota or 0 for c in updates) == pytest.approx(4.4, abs=1e-5)
        assert found.conditions[-1].forbid_schedule_cpu is True
        assert found.conditions[-1].batch_cpu_allowed == pytest.approx(4.4)

        # 2. Suppressed batch uses all it may (4.4 of 12 requested: 37 % satisfied): once the window agrees, evict
        #    enough for the rest to reach 80 %: release 12 - 4.4/0.8 = 6.5 cores → b0 and b1 (lowest priorities).
        starved = {cid: 4.4 / 3 for cid in batch}
        for _ in range(40):
            await send(js, metrics("n1", time.time(), node_cpu=22.4, batch=starved))
            await asyncio.sleep(0.02)
            if any(c.kind == "evict" for c in found.commands):
                break
        await found.wait_for(lambda f: any(e.kind == "evict" for e in f.events))
        evicts = [c.container_id for c in found.commands if c.kind == "evict"]
        assert evicts == ["b0", "b1"]
        event = next(e for e in found.events if e.kind == "evict")
        assert [v.container_id for v in event.victims] == ["b0", "b1"]
        assert event.reason == "cpu-satisfaction"
        assert event.numbers["cpu"]["release_cores"] == pytest.approx(6.5)
        # The recorded input replays to the same decision (docs/planning.md `eru plan` kind evict).
        replayed = solve_evict(event.input)
        assert [v["id"] for v in replayed["evict"]] == ["b0", "b1"]
        await found.wait_for(lambda f: any(c.state == "evicting" for c in f.conditions))

        # 3. The victims are gone and prod's load falls: forbid clears (hysteresis), suppression is lifted.
        for _ in range(5):
            await send(js, metrics("n1", time.time(), node_cpu=11.0, batch={"b2": 1.0}))
            await asyncio.sleep(0.05)
        await found.wait_for(lambda f: any(e.kind == "unsuppress" for e in f.events))
        await found.wait_for(lambda f: f.conditions[-1].state == "normal")
        assert found.conditions[-1].forbid_schedule_cpu is False
        lifted = [c for c in found.commands if c.kind == "suppress" and c.cpu_quota is None]
        assert [c.container_id for c in lifted] == ["b2"]
        # prod is never touched, and everything came from this replica.
        assert all(c.container_id != "p1" for c in found.commands)
        assert set(found.sources) == {"eviction/r1"}
    finally:
        await replica.stop()


async def test_memory_eviction_is_immediate_and_bad_samples_do_not_stop_the_service(
    nats_url: str, nc: Any, js: Any
) -> None:
    found = await collect(nc)
    replica = await start_replica(nats_url, "r1")
    try:
        await js.publish("eru.metrics.n2", b"\xc1 not msgpack")
        await nc.publish("eru.metrics.n2", b"{}", headers={"Content-Type": "application/json"})
        # A sample published on another node's subject is refused as well.
        wrong = metrics("n2x", time.time(), node_cpu=5, batch={})
        await publish(js, "eru.metrics.n9", wrong, new_envelope("eru.metrics", "node-agent/n9"))
        # 45 GiB of 64 = 70.3 % ≥ 70 %: release down to 68 % (1.48 GiB) at once; lowest priority first → b0 (2 GiB).
        sample = metrics(
            "n2", time.time(), node_cpu=12.0, batch={"b0": 0.5, "b1": 0.5}, node_memory=45 * GIB, batch_memory=2 * GIB
        )
        await send(js, sample)
        # the command, the event and the condition are published in that order (eru_eviction.handlers): wait for all
        await found.wait_for(
            lambda f: (
                any(c.kind == "evict" for c in f.commands)
                and any(e.kind == "evict" for e in f.events)
                and bool(f.conditions)
            )
        )
        assert [c.container_id for c in found.commands if c.kind == "evict"] == ["b0"]
        event = next(e for e in found.events if e.kind == "evict")
        assert event.victims[0].reason == "memory"
        assert event.victims[0].release == 2 * GIB
        assert found.conditions[-1].forbid_schedule_memory is True
        # the three bad samples were refused (counted), and the service went on
        for _ in range(100):
            if replica.ctx.load.get("rejected") == 3:
                break
            await asyncio.sleep(0.05)
        assert replica.ctx.load.get("rejected") == 3, replica.ctx.load
    finally:
        await replica.stop()


async def test_a_new_owner_rebuilds_the_window_from_the_metrics_stream(nats_url: str, nc: Any, js: Any) -> None:
    found = await collect(nc)
    first = await start_replica(nats_url, "r1", nodes={"n3": CPU_WATERMARKS})
    starved = {cid: 4.4 / 3 for cid in ("b0", "b1", "b2")}
    try:
        # Three samples with every CPU condition true: the window is not yet covered (4 needed), nothing happens.
        now = time.time()
        for age in (3.0, 2.0, 1.0):
            await send(js, metrics("n3", now - age, node_cpu=22.4, batch=starved, allowed=4.4))
        await asyncio.sleep(0.3)
    finally:
        await first.stop()
    assert not [c for c in found.commands if c.kind == "evict"]
    second = await start_replica(nats_url, "r2", nodes={"n3": CPU_WATERMARKS})
    try:
        deadline = time.monotonic() + 10
        while second.ctx.load.get("rebuilt_samples", 0.0) < 3:
            assert time.monotonic() < deadline, "the window was not rebuilt"
            await asyncio.sleep(0.05)
        # One more sample completes the window only because the three before it were replayed into it.
        await send(js, metrics("n3", time.time(), node_cpu=22.4, batch=starved, allowed=4.4))
        # the command and the eviction event travel separately: wait for both before reading the event
        await found.wait_for(
            lambda f: any(c.kind == "evict" for c in f.commands) and any(e.kind == "evict" for e in f.events)
        )
        event = next(e for e in found.events if e.kind == "evict")
        assert event.replica == "r2"
        assert event.numbers["window"]["samples"] == 4
        assert [v.container_id for v in event.victims] == ["b0", "b1"]
    finally:
        await second.stop()


async def test_a_bad_watermark_setting_stops_the_replica_naming_the_field(nats_url: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        await start_replica(nats_url, "r1", nodes={"n1": {"cpu_evict": 60}})
    assert caught.value.field == "eviction.nodes.n1.cpu_evict"  # the setting the operator wrote
    assert "cpu_evict (60) must be at least cpu_suppress (65)" in caught.value.message
