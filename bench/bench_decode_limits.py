"""Cost of bounded decoding (docs/bus.md "Bounded decoding"): raw msgpack/JSON decoding against `decode_value` with
the default limits, for a deploy request and a batch of 256 container events. Prints one JSON line per body:
microseconds `[raw, bounded]`, best of 5 rounds of 2,000. Run: `.venv/bin/python -m bench.bench_decode_limits`."""

from __future__ import annotations

import json
import timeit
from collections.abc import Callable
from typing import Any

import msgpack

from eru.bus.codec import JSON, decode_value

DEPLOY = {
    "pod": "p1",
    "count": 5,
    "mode": "auto",
    "request_id": "r-1",
    "workload": {
        "name": "web",
        "image": "busybox",
        "command": ["sh", "-c", "sleep 1"],
        "env": {"A": "1"},
        "labels": {"x": "y"},
        "resources": {"cpu_request": 1.5, "cpu_bind": True, "memory_request": "512MiB"},
    },
}
EVENTS = {
    "node": "n1",
    "events": [
        {"node": "n1", "container_id": f"c{i}", "kind": "started", "command_id": f"k{i}", "deploy_id": "d"}
        for i in range(256)
    ],
}
ROUNDS = 2000


def best_microseconds(work: Callable[[], Any]) -> float:
    """The best of 5 rounds, per call, in microseconds."""
    return round(min(timeit.repeat(work, number=ROUNDS, repeat=5)) / ROUNDS * 1e6, 2)


def main() -> None:
    """Print the figures."""
    for name, value in (("deploy", DEPLOY), ("256 events", EVENTS)):
        packed, text = msgpack.packb(value), json.dumps(value).encode()
        figures = {
            "body": name,
            "msgpack_us": [
                best_microseconds(lambda: msgpack.unpackb(packed, raw=False, strict_map_key=False)),  # noqa: B023 - timed at once, inside this iteration
                best_microseconds(lambda: decode_value(packed)),  # noqa: B023 - timed at once, inside this iteration
            ],
            "json_us": [
                best_microseconds(lambda: json.loads(text)),  # noqa: B023 - timed at once, inside this iteration
                best_microseconds(lambda: decode_value(text, JSON)),  # noqa: B023 - timed at once, inside this iteration
            ],
        }
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
