"""How long the embedded PostgreSQL takes to start (fresh: initdb + start; warm: existing data dir) and to stop.

Prints JSON: the median and all runs of each, in seconds. `python bench/bench_store_postgres.py [--runs N]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from eru.testing.postgres_server import EmbeddedPostgres


def measure(runs: int) -> dict[str, dict[str, object]]:
    """Time `runs` fresh starts, warm restarts and stops, each in its own temporary state directory."""
    timings: dict[str, list[float]] = {"fresh_start": [], "warm_start": [], "stop": []}
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="eru-bench-pg-") as state:
            server = EmbeddedPostgres(Path(state), durable=True)
            started = time.perf_counter()
            server.start()
            timings["fresh_start"].append(time.perf_counter() - started)
            started = time.perf_counter()
            server.stop()
            timings["stop"].append(time.perf_counter() - started)
            started = time.perf_counter()
            server.start()
            timings["warm_start"].append(time.perf_counter() - started)
            server.stop()
    return {
        name: {"median_seconds": round(statistics.median(values), 4), "runs": [round(v, 4) for v in values]}
        for name, values in timings.items()
    }


def main() -> None:
    """Parse `--runs` and print the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps({"benchmark": "embedded_postgres", **measure(max(args.runs, 1))}, indent=2))


if __name__ == "__main__":
    main()
