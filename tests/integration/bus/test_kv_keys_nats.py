"""A KV bucket's keys listed by the server in one answer (`eru.bus.kv_keys`, docs/replicas.md "Listing the
heartbeats"), on a real nats-server: every key that exists is listed while other keys are being rewritten (where
nats-py 2.16's `kv.keys()` comes back short, nats-io/nats.py#842), deleted and purged keys are not live, expired
ones are not listed, and many keys come back in one answer."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from nats.js import api

from eru.bus.kv_keys import kv_keys, live_entries
from eru.bus.leases import PartitionLeases

pytestmark = pytest.mark.timeout(60)


async def bucket(js: Any, name: str, ttl: float = 30.0) -> Any:
    config = api.KeyValueConfig(bucket=name, history=1, ttl=ttl, storage=api.StorageType.MEMORY)
    return await js.create_key_value(config=config)


async def test_every_heartbeat_is_listed_while_the_replicas_keep_rewriting_theirs(js: Any) -> None:
    kv = await bucket(js, "hb")
    replicas = [f"r{i}" for i in range(5)]
    for name in replicas:
        await kv.put(f"replicas.{name}", name.encode())
    for partition in range(8):
        await kv.put(f"p.{partition}", b"r0")
    stop = asyncio.Event()
    rewrites = 0

    async def ticking(name: str) -> None:  # what every replica does each tick: its heartbeat, its leases
        nonlocal rewrites
        while not stop.is_set():
            await kv.put(f"replicas.{name}", name.encode())
            await kv.put(f"p.{replicas.index(name)}", name.encode())
            rewrites += 1
            await asyncio.sleep(0)

    writers = [asyncio.create_task(ticking(name)) for name in replicas[:2]]
    try:
        listings = []
        for _ in range(40):
            listings.append(await kv_keys(js, "hb", "replicas."))
            live = await live_entries(js, kv, "hb", "replicas.")
            assert sorted(live) == [f"replicas.{name}" for name in replicas]
            assert {key: entry.value for key, entry in live.items()} == {
                f"replicas.{name}": name.encode() for name in replicas
            }
    finally:
        stop.set()
        await asyncio.gather(*writers)
    assert rewrites > 40  # the keys really moved while they were listed
    assert all(listing == [f"replicas.{name}" for name in replicas] for listing in listings)
    assert await kv_keys(js, "hb", "p.") == sorted(f"p.{partition}" for partition in range(8))
    assert len(await kv_keys(js, "hb")) == len(replicas) + 8


async def test_deleted_and_purged_keys_are_listed_by_their_marker_but_not_live(js: Any) -> None:
    kv = await bucket(js, "gone")
    for name in ("a", "b", "c", "d"):
        await kv.put(f"replicas.{name}", name.encode())
    await kv.delete("replicas.b")  # a clean stop
    await kv.purge("replicas.c")
    assert await kv_keys(js, "gone", "replicas.") == ["replicas.a", "replicas.b", "replicas.c", "replicas.d"]
    live = await live_entries(js, kv, "gone", "replicas.", skip=frozenset({"replicas.d"}))
    assert sorted(live) == ["replicas.a"]
    await kv.put("replicas.b", b"b")  # back under the same name
    assert sorted(await live_entries(js, kv, "gone", "replicas.")) == ["replicas.a", "replicas.b", "replicas.d"]
    assert await kv_keys(js, "gone", "nothing.") == []


async def test_an_expired_key_is_not_listed(js: Any) -> None:
    kv = await bucket(js, "ttl", ttl=1.0)
    await kv.put("replicas.dead", b"dead")
    assert await kv_keys(js, "ttl", "replicas.") == ["replicas.dead"]
    async with asyncio.timeout(10):
        while await kv_keys(js, "ttl", "replicas."):  # noqa: ASYNC110 - waiting for the server's max age
            await asyncio.sleep(0.1)
    assert await live_entries(js, kv, "ttl") == {}


async def test_two_thousand_keys_come_back_in_one_answer(js: Any) -> None:
    kv = await bucket(js, "many")
    acks = [kv.put(f"w.pod{i % 7}.job{i}", b"{}") for i in range(2000)]
    await asyncio.gather(*acks)
    keys = await kv_keys(js, "many")
    assert len(keys) == 2000
    assert keys == sorted(f"w.pod{i % 7}.job{i}" for i in range(2000))
    assert len(await kv_keys(js, "many", "w.pod3.")) == len(range(3, 2000, 7))


async def test_replicas_see_each_other_through_the_listing(js: Any) -> None:
    replicas = [PartitionLeases(js, "leases_listing", f"alloc-{i}", 8, 30.0) for i in range(3)]
    for leases in replicas:
        await leases.start()
        await leases.tick()
    for leases in replicas:
        assert await leases.live_replicas() == ["alloc-0", "alloc-1", "alloc-2"]
        assert set(leases.peers) == {"alloc-0", "alloc-1", "alloc-2"} - {leases.replica}
    await replicas[2].release_all()  # a clean stop deletes its heartbeat
    assert await replicas[0].live_replicas() == ["alloc-0", "alloc-1"]
    for _ in range(2):
        for leases in replicas[:2]:
            await leases.tick()
    assert sorted(len(leases.owned) for leases in replicas[:2]) == [4, 4]
