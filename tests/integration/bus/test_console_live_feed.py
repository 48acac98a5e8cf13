"""The console's feed on a real nats-server: container and deploy events reach the console's connection only while
a browser listens (nats-server sends nobody else's copy), and reach the browser once it does (docs/console.md
"Live feed")."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import nats

from eru.console.feed import Feed


async def publish_events(nc: Any, count: int) -> None:
    for index in range(count):
        body = msgpack.packb({"container_id": f"c{index}", "kind": "started", "deploy_id": "d1"})
        await nc.publish("eru.container.n1.started", body)
    await nc.publish("eru.deploy.d1.completed", msgpack.packb({}))
    await nc.flush()


async def settled(console: Any) -> int:
    """The console connection's received count once nothing more is on its way (a round trip after the sends)."""
    await console.flush()
    await asyncio.sleep(0)
    return int(console.stats["in_msgs"])


async def test_events_reach_the_console_only_while_a_browser_listens(nc: Any, nats_url: str) -> None:
    console = await nats.connect(nats_url)
    feed = Feed()
    try:
        await feed.start(console)
        before = await settled(console)
        await publish_events(nc, 50)
        assert await settled(console) == before  # nobody listens: not one of the 51 was sent to the console

        browser = feed.listen()
        await feed.followed()
        await publish_events(nc, 3)
        kinds: list[str] = []
        while len(kinds) < 4:
            event, _ = await asyncio.wait_for(browser.get(), timeout=10)
            kinds.append(event)
        assert kinds == ["container", "container", "container", "deploy"]

        feed.forget(browser)
        await feed.followed()
        before = await settled(console)
        await publish_events(nc, 20)
        assert await settled(console) == before
    finally:
        await feed.stop()
        await console.close()
