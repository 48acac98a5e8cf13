"""What listing the lease heartbeats costs (docs/replicas.md "Listing the heartbeats"): nats-py's `kv.keys()` plus a
read per peer (before) against `eru.bus.kv_keys.live_entries` (one STREAM.INFO with a subjects filter plus the same
reads), on a real nats-server, `--calls` listings each, interleaved, with `--replicas` heartbeats in the bucket and
16 partition leases beside them (the allocator's defaults). Wall time per listing (median, p99) and CPU of this
process and of nats-server per listing; how many listings came back short, counted against the truth. With
`--writers N`, N tasks rewrite the heartbeats all the while (as ticking replicas do): where `keys()` comes back short.

    python bench/bench_kv_listing.py [--calls 500] [--replicas 3] [--writers 0]

Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from typing import Any

from nats.js import api
from nats.js.errors import KeyNotFoundError, NoKeysError

from eru.bus import connect
from eru.bus.kv_keys import live_entries
from eru.testing.nats_server import NatsServer

BUCKET = "bench_leases"


def server_cpu(pid: int) -> float:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()  # noqa: SIM115 - one read of /proc
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def old_listing(kv: Any) -> int:
    try:
        keys = [key for key in await kv.keys() if key.startswith("replicas.")]
    except NoKeysError:
        keys = []
    for key in keys[1:]:
        try:
            await kv.get(key)
        except KeyNotFoundError:
            continue
    return len(keys)


async def new_listing(js: Any, kv: Any) -> int:
    return len(await live_entries(js, kv, BUCKET, "replicas.", skip=frozenset({"replicas.r0"}))) + 1


async def rewrite(kv: Any, replicas: int, stop: asyncio.Event) -> None:
    index = 0
    while not stop.is_set():
        await kv.put(f"replicas.r{index % replicas}", f"r{index % replicas}".encode())
        index += 1
        await asyncio.sleep(0.001)


async def main(calls: int, replicas: int, writers: int, url: str, pid: int) -> dict[str, Any]:
    nc = await connect(url, name="bench-kv-listing")
    js = nc.jetstream()
    config = api.KeyValueConfig(bucket=BUCKET, history=1, ttl=60.0, storage=api.StorageType.MEMORY)
    kv = await js.create_key_value(config=config)
    for i in range(replicas):
        await kv.put(f"replicas.r{i}", f"r{i}".encode())
    for partition in range(16):
        await kv.put(f"p.{partition}", b"r0")
    figures: dict[str, dict[str, list[float]]] = {"keys": {}, "stream_info": {}}
    for kind in figures:
        figures[kind] = {"wall": [], "cpu": [], "server": [], "short": []}
    stop = asyncio.Event()
    rewriting = [asyncio.create_task(rewrite(kv, replicas, stop)) for _ in range(writers)]
    for _ in range(calls):
        for kind in figures:
            cpu, server, wall = time.process_time(), server_cpu(pid), time.perf_counter()
            found = await (old_listing(kv) if kind == "keys" else new_listing(js, kv))
            figures[kind]["wall"].append(time.perf_counter() - wall)
            figures[kind]["cpu"].append(time.process_time() - cpu)
            figures[kind]["server"].append(server_cpu(pid) - server)
            figures[kind]["short"].append(float(found < replicas))
    stop.set()
    await asyncio.gather(*rewriting)
    await nc.close()
    out: dict[str, Any] = {"calls": calls, "replicas": replicas, "writers": writers, "load": os.getloadavg()[0]}
    for kind, got in figures.items():
        wall = sorted(got["wall"])
        out[kind] = {
            "wall_ms_median": round(statistics.median(wall) * 1000, 3),
            "wall_ms_p99": round(wall[int(len(wall) * 0.99) - 1] * 1000, 3),
            "client_cpu_ms": round(sum(got["cpu"]) / calls * 1000, 3),
            "server_cpu_ms": round(sum(got["server"]) / calls * 1000, 3),
            "short_listings": int(sum(got["short"])),
        }
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--writers", type=int, default=0)
    args = parser.parse_args()
    with NatsServer() as server:
        assert server.pid is not None
        print(json.dumps(asyncio.run(main(args.calls, args.replicas, args.writers, server.url, server.pid))))
