"""The allocator's housekeeping loop: overdue containers fail (`events.fail_overdue`), a down node's containers are
lost (`node_down`), relayed outbox rows and old
inbox marks are forgotten, and retention runs (docs/store.md "Retention")."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from eru.settings import Settings
from eru.store.delivery import PruneStore
from eru.store.retention import bucket_seconds
from eru.store.settled_retention import windows_for
from eru_allocator.containers.events import EventContext, fail_overdue
from eru_allocator.containers.node_down import mark_down_lost

log = structlog.get_logger()

PRUNE_EVERY_SECONDS = 60.0
OUTBOX_KEEP_SECONDS = 3600.0
INBOX_KEEP_SECONDS = 86400.0


async def sweep(
    ctx: EventContext,
    settings: Settings,
    stopping: asyncio.Event,
    deploy_max_deliver: int,
    store: PruneStore,
    active: Callable[[], bool] | None = None,
) -> None:
    """Every few seconds: fail the containers no node agent answered for (see `events.fail_overdue`); every
    minute: forget relayed outbox rows after an hour (JetStream has them) and inbox marks after a day (far past
    any redelivery), both at most the retention, and run retention (eru.store.retention: finished rows to
    history, expired partitions dropped; one replica at a time). Only while `active()` says so (the allocator:
    the lead replica; docs/replicas.md "One replica relays"). The prune round and the retention pass go through
    `store` (`eru.store.delivery.PruneStore`)."""
    own = settings.allocator
    # the first pass soon after start (partitions for the present), then at least twice per partition width
    prune_every = min(PRUNE_EVERY_SECONDS, bucket_seconds(settings.retention_seconds) / 2)
    next_prune = time.monotonic()
    while not stopping.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), own.sweep_interval_seconds)
        if stopping.is_set():
            return
        if active is not None and not active():
            continue
        try:
            await fail_overdue(ctx, own.pending_timeout_seconds)
            await mark_down_lost(ctx, own.node_down_after_seconds)  # docs/node-agent.md "Health and node TTL"
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + prune_every
                retention = settings.retention_seconds
                # how long request ids are remembered follows the streams' ages (eru.store.settled_retention)
                windows = windows_for(settings, deploy_max_deliver)
                keep = (min(OUTBOX_KEEP_SECONDS, retention), min(INBOX_KEEP_SECONDS, retention))
                pruned = await store.prune(windows, *keep)
                report = await store.retention_pass(retention)
                log.info(
                    "store.pruned",
                    outbox=pruned.outbox,
                    inbox=pruned.inbox,
                    moved=report.moved,
                    dropped=report.dropped,
                    busy=report.busy,
                )
        except Exception as error:  # the sweep retries next round; it must never stop the service
            log.warning("containers.sweep_failed", error=f"{type(error).__name__}: {error}")
