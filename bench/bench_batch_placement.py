"""What the batch allowance (docs/colocation.md) costs the planning core: `plan_deploy` of a batch request vs the same
request as prod, on 1,000 nodes of 32 cores / 64 GiB (idle, and varied usage so no two nodes share an analysis), every
node with a different batch allowance.

Each figure is the median of `--runs` runs of one call each, after one warm-up call. Prints JSON.
Usage: python bench/bench_batch_placement.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import replace

from eru.planning import NodeResources, PlanningConfig, normalize_request, plan_deploy

GIB = 1 << 30
CONFIG = PlanningConfig()


def pod(varied: bool, seed: int = 7) -> list[NodeResources]:
    """1,000 nodes with allowances of 0–32 cores and 0–64 GiB; with `varied`, random cores and memory used."""
    rng = random.Random(seed)
    nodes = []
    for index in range(1000):
        used = {str(core): rng.choice((30, 50, 100)) for core in range(32) if varied and rng.random() < 0.3}
        nodes.append(
            NodeResources(
                f"node-{index:04d}",
                {str(core): 100 for core in range(32)},
                64 * GIB,
                used_cpu_map=used,
                used_memory=rng.randrange(16) * GIB if varied else 0,
                batch_cpu=rng.randrange(33) * 100,
                batch_memory=rng.randrange(65) * GIB,
            )
        )
    return nodes


def median_ms(nodes: list[NodeResources], batch: bool, cpu_bind: bool, runs: int) -> float:
    """Median wall time of `plan_deploy` (auto, 5,000 instances) in ms."""
    raw = {"cpu_bind": cpu_bind, "cpu_request": 1.5, "memory_request": GIB}
    request = replace(normalize_request(raw, CONFIG), batch=batch)
    plan_deploy(nodes, request, CONFIG, mode="auto", count=5000)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        plan_deploy(nodes, request, CONFIG, mode="auto", count=5000)
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


def main() -> None:
    """Run every case and print the figures as JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    figures = {}
    for varied in (False, True):
        nodes = pod(varied)
        for cpu_bind in (True, False):
            case = f"{'varied' if varied else 'idle'}-{'cpu_bind' if cpu_bind else 'memory_prime'}"
            figures[case] = {
                "prod_ms": median_ms(nodes, False, cpu_bind, runs),
                "batch_ms": median_ms(nodes, True, cpu_bind, runs),
            }
    print(json.dumps({"runs": runs, "nodes": 1000, "count": 5000, "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
