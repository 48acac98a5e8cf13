"""The eviction service's main (started by `eru.service.run`): leases, the metrics subscription, the engine.

Each replica subscribes to `eru.metrics.*` on core NATS and handles only the nodes whose partition it leases
(`partitions.py`); the lease loop renews and rebalances every third of the lease TTL and drops the trackers of
partitions it lost. On stop the leases are given back so the other replicas take over at once.

The samples come on a connection of their own: on the service's connection a backlog of samples would sit in front
of the answers to the lease renewals and the health probes (the server sends one connection's messages in order),
and a burst longer than the lease TTL let the leases expire and the nodes move (docs/colocation.md "Keeping up").
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from nats.aio.client import Client

from eru.bus import provision_streams
from eru.bus.connection import connect, settle, tls_context
from eru.bus.streams import streams_for
from eru.service import ServiceContext
from eru_eviction.budgets import BudgetBook
from eru_eviction.handlers import EvictionEngine
from eru_eviction.overrides import OverrideSync
from eru_eviction.partitions import PartitionLeases, partition_of

log = structlog.get_logger()

METRICS_SUBJECTS = "eru.metrics.*"
PENDING_BYTES = 256 * 1024 * 1024


async def samples_connection(ctx: ServiceContext) -> Client:
    """A second connection to the bus, with the service connection's settings, that carries only the samples."""
    bus = ctx.settings.bus
    return await connect(
        bus.url,
        name=f"eru-{ctx.name}-{ctx.settings.replica}-samples",
        connect_timeout=bus.connect_timeout_seconds,
        inbox_prefix=bus.inbox_prefix,
        tls=tls_context(bus.tls_ca_file, bus.tls_cert_file, bus.tls_key_file) if bus.tls else None,
    )


async def rebuild(engine: EvictionEngine, leases: PartitionLeases, gained: set[int]) -> None:
    """Rebuild the windows of the nodes in `gained` partitions from the metrics stream (never raises)."""
    try:
        await engine.rebuild(lambda node: partition_of(node, leases.partitions) in gained)
    except asyncio.CancelledError:
        raise
    except Exception as error:
        log.warning("eviction.rebuild_failed", error=str(error) or type(error).__name__)


async def service_main(ctx: ServiceContext) -> None:
    """Serve until the runner asks to stop."""
    settings = ctx.settings.eviction
    await provision_streams(ctx.js, streams_for(ctx.settings))
    leases = PartitionLeases(
        ctx.js, ctx.settings.replica, settings.partitions, settings.lease_ttl_seconds, ctx.settings.bus.stream_replicas
    )
    await leases.start()
    budgets = BudgetBook(ctx.js)
    await budgets.start()
    engine = EvictionEngine(
        ctx.js, replica=ctx.settings.replica, settings=settings, owns=leases.owns, load=ctx.load, budgets=budgets
    )
    overrides = OverrideSync(ctx.nc, engine.resolver, settings.condition_refresh_seconds, engine.source)
    await overrides.start()
    overrides.poke()
    gained, _ = await leases.tick()
    rebuilding: set[asyncio.Task[None]] = set()
    # A backlog beyond these limits is dropped by the client (slow consumer, logged): such samples would be stale.
    samples_nc = await samples_connection(ctx)
    try:
        subscription = await samples_nc.subscribe(
            METRICS_SUBJECTS, cb=engine.on_message, pending_msgs_limit=1_000_000, pending_bytes_limit=PENDING_BYTES
        )
        await settle(samples_nc)  # the subscription is live before the replica says it is ready
    except BaseException:
        await samples_nc.close()
        raise
    ctx.ready.set()
    rebuilding.add(asyncio.create_task(rebuild(engine, leases, gained)))
    log.info("eviction.started", partitions=settings.partitions, owned=sorted(leases.owned))
    try:
        while not ctx.stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(ctx.stopping.wait(), timeout=settings.lease_ttl_seconds / 3)
            if ctx.stopping.is_set():
                break
            overrides.poke()  # a missed watermark change, within condition_refresh_seconds
            try:
                await budgets.refresh()  # other replicas' claims, for the next decisions (claims stay authoritative)
                gained, lost = await leases.tick()
            except Exception as error:  # a lease round failing (NATS away) must not end the service
                log.warning("eviction.lease_tick_failed", error=str(error) or type(error).__name__)
                continue
            if lost:
                engine.forget(leases.owns)
            if gained:
                rebuilding.add(asyncio.create_task(rebuild(engine, leases, gained)))
            ctx.load.update(
                nodes=float(len(engine.trackers)),
                partitions=float(len(leases.owned)),
                samples=float(engine.stats.samples),
                evictions=float(engine.stats.events),
                skipped=float(engine.stats.skipped),
            )
    finally:
        for task in rebuilding:
            task.cancel()
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()
        with contextlib.suppress(Exception):
            await samples_nc.close()
        with contextlib.suppress(Exception):
            await overrides.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(engine.drain(), timeout=5)
        with contextlib.suppress(Exception):
            await leases.release_all()
        log.info("eviction.stopped", samples=engine.stats.samples, commands=engine.stats.commands)
