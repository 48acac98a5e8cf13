"""Provisioning a stack's bus and store (`eru up`, `eru provision`): JetStream streams, waiting for a new cluster's
leader, and the PostgreSQL migrations."""

from __future__ import annotations

import asyncio
import time

from eru.stack.info import StackError


async def provision_all(
    nats_url: str,
    dsn: str,
    replicas: int | None = None,
    within: float = 60.0,
    groups: dict[str, list[str]] | None = None,
) -> None:
    """Apply migrations and provision the JetStream streams with `replicas` copies (default: the setting
    `bus.stream_replicas`), and the command consumer of each sim process's node group (`groups`: group → nodes,
    eru.bus.node_groups); idempotent, safe to run from several processes. A cluster that has just started elects
    its JetStream leader first: until then stream requests fail, and are retried for up to `within` seconds."""
    import dataclasses

    from eru.bus.connection import connect
    from eru.bus.node_groups import ensure_group_consumer
    from eru.bus.streams import provision_streams, streams_for
    from eru.settings import load_settings
    from eru.store.migrate import apply_migrations
    from eru.store.pool import create_pool

    specs = streams_for(load_settings())
    if replicas is not None:
        specs = tuple(dataclasses.replace(spec, replicas=replicas) for spec in specs)
    nc = await connect(nats_url, name="eru-provision")
    try:
        deadline = time.monotonic() + within
        while True:
            try:
                await provision_streams(nc.jetstream(), specs)
                for group, nodes in sorted((groups or {}).items()):
                    await ensure_group_consumer(nc.jetstream(), group, nodes)
                break
            except Exception as error:  # no JetStream leader yet, or not every peer known: wait for the cluster
                if time.monotonic() > deadline:
                    raise StackError(f"JetStream streams could not be created within {within:.0f} s: {error}") from None
                await asyncio.sleep(0.5)
    finally:
        await nc.close()
    pool = await create_pool(dsn, min_size=1, max_size=2)
    try:
        await apply_migrations(pool)
    finally:
        await pool.close()
