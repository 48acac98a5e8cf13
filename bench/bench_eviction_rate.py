"""One eviction replica's per-sample cost on the pure path (issue 41): decoding a msgpack `NodeMetrics` body
(bounded decoding + pydantic) and `NodeTracker.observe`, no bus. Prints one JSON document with node samples/s of
decode alone, observe alone and both, at `--containers` containers a node (the best of `--repeat` runs, so a busy
machine shows less).

The figure that matters is `decode_observe_per_s`: the samples one replica works off per second of one core, so
`nodes / metrics_interval / decode_observe_per_s` is the share of a core the replica needs for its nodes.
Usage: python bench/bench_eviction_rate.py [--nodes 200] [--rounds 10] [--containers 50] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_eviction import node_sample
from eru.bus import decode, encode
from eru.colocation.config import ColocationConfig
from eru.colocation.tracker import NodeTracker
from eru.domain import NodeMetrics


def rate(count: int, started: float) -> float:
    return round(count / (time.perf_counter() - started), 1)


def run(nodes: int, rounds: int, containers: int) -> dict[str, float]:
    config = ColocationConfig()
    samples = [node_sample(f"n{i}", 1000.0 + 5 * r, containers) for r in range(rounds) for i in range(nodes)]
    bodies = [encode(sample) for sample in samples]
    started = time.perf_counter()
    for body in bodies:
        decode(body, NodeMetrics)
    decode_rate = rate(len(bodies), started)
    trackers = {f"n{i}": NodeTracker(f"n{i}", config) for i in range(nodes)}
    started = time.perf_counter()
    for sample in samples:
        trackers[sample.node].observe(sample, sample.time)
    observe_rate = rate(len(samples), started)
    trackers = {f"n{i}": NodeTracker(f"n{i}", config) for i in range(nodes)}
    started = time.perf_counter()
    for body in bodies:
        metrics = decode(body, NodeMetrics)
        trackers[metrics.node].observe(metrics, metrics.time)
    both = rate(len(bodies), started)
    return {"decode_per_s": decode_rate, "observe_per_s": observe_rate, "decode_observe_per_s": both}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--containers", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [run(args.nodes, args.rounds, args.containers) for _ in range(args.repeat)]
    best = {key: max(r[key] for r in runs) for key in runs[0]}
    report = {
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load": os.getloadavg()[0]},
        "containers_per_node": args.containers,
        "node_samples": args.nodes * args.rounds,
        **best,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
