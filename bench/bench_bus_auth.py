"""What a NATS connection costs with the server's users stored as bcrypt hashes, by bcrypt cost (docs/security.md).

nats-server checks the hash at every connection (each `eru` command, each reconnect of a service), so the cost
factor is paid there. Prints JSON: per configuration (plaintext, bcrypt at each cost) the median and p90 connect
time over N connections, plus the load average the figures were taken at.

Usage: .venv/bin/python bench/bench_bus_auth.py [--connects 20] [--costs 4,6,10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import nats

from eru.bus import access
from eru.testing.nats_server import NatsServer

DEFAULT_COST = access.BCRYPT_ROUNDS


async def _connects(url: str, prefix: str, count: int) -> dict[str, float]:
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client = await nats.connect(url, inbox_prefix=prefix, allow_reconnect=False)
        times.append(time.perf_counter() - started)
        await client.close()
    times.sort()
    return {
        "median_ms": round(times[len(times) // 2] * 1000, 1),
        "p90_ms": round(times[int(len(times) * 0.9)] * 1000, 1),
    }


async def _measure(cost: int | None, count: int) -> dict[str, float]:
    account = access.client_account("bench", access.new_password())
    directory = Path(tempfile.mkdtemp(prefix="eru-bench-auth-"))
    access.BCRYPT_ROUNDS = cost or DEFAULT_COST
    (directory / "nats.conf").write_text(access.render_server_config([account], hashed=cost is not None))
    server = NatsServer(store_dir=directory / "store", config_file=directory / "nats.conf")
    server.start()
    try:
        return await _connects(account.url(server.url), account.inbox_prefix, count)
    finally:
        server.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connects", type=int, default=20)
    parser.add_argument("--costs", default="4,6,10")
    args = parser.parse_args()
    figures: dict[str, object] = {"connects": args.connects, "load_average": os.getloadavg()[0]}
    figures["plaintext"] = await _measure(None, args.connects)
    for cost in (int(c) for c in args.costs.split(",")):
        figures[f"bcrypt_cost_{cost}"] = await _measure(cost, args.connects)
    figures["eru_default_cost"] = DEFAULT_COST
    print(json.dumps(figures))


if __name__ == "__main__":
    asyncio.run(main())
