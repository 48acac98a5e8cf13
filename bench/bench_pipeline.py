"""The full deploy pipeline (docs/planning.md, docs/placement-modes.md): every node's capacity, the placement, the
concrete plans — against Go Eru.

`plan_deploy(nodes, request, config, mode="auto", count=10_000)` over 1,000 nodes of 32 cores and 64 GiB, the
request cpu-bind 1.5 CPU + 1 GiB (Go Eru: 1,037 ms) and the same memory-prime (Go Eru: 18.3 ms). Because eru
analyses identical nodes once per call, the benchmark also runs a "varied" pod in which every node has a different
usage (random cores partly or wholly used, random memory used), so no two nodes share an analysis; it is compared to
the same Go figure, which was measured on idle nodes. The white-paper workloads (10,000 nodes) run too: capacity for
memory-prime (10.24 M containers, < 60 ms) and cpu-prime (180 K containers, ~400 ms), and an even spread.

Each figure is the median of `--runs` runs (default 7) of one call each, after one warm-up call. Prints JSON.
Usage: python bench/bench_pipeline.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from eru.planning import NodeResources, PlanningConfig, node_capacities, normalize_request, plan_deploy

GIB = 1 << 30
SEED = 20240601
CONFIG = PlanningConfig()


def idle_nodes(count: int, cores: int, memory: int) -> list[NodeResources]:
    """`count` idle nodes named node-00000…, each its own objects (nothing shared between nodes)."""
    return [
        NodeResources(f"node-{index:05d}", {str(core): 100 for core in range(cores)}, memory) for index in range(count)
    ]


def varied_nodes(count: int, cores: int, memory: int) -> list[NodeResources]:
    """Nodes whose usage differs: about a third of the cores partly or wholly used, 0–16 GiB memory used."""
    rng = random.Random(SEED)
    nodes = []
    for index in range(count):
        used = {}
        for core in range(cores):
            roll = rng.random()
            if roll < 0.15:
                used[str(core)] = 100
            elif roll < 0.35:
                used[str(core)] = rng.randrange(10, 100, 10)
        memory_used = rng.randrange(0, 16 * GIB, 1 << 20)
        nodes.append(
            NodeResources(
                f"node-{index:05d}",
                {str(core): 100 for core in range(cores)},
                memory,
                used_cpu_map=used,
                used_memory=memory_used,
            )
        )
    return nodes


def median_ms(call: Callable[[], object], runs: int) -> tuple[float, list[float]]:
    """Median wall time of one call, in ms, over `runs` runs after a warm-up."""
    call()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), times


def pipeline_case(
    name: str, nodes: list[NodeResources], raw_request: dict[str, Any], count: int, go_ms: float | None, runs: int
) -> dict[str, Any]:
    """One plan_deploy workload: checks the answer, then times it."""
    request = normalize_request(raw_request, CONFIG)
    result = plan_deploy(nodes, request, CONFIG, mode="auto", count=count)
    assert sum(result.placements.values()) == count
    assert len(result.containers) == count
    median, times = median_ms(lambda: plan_deploy(nodes, request, CONFIG, mode="auto", count=count), runs)
    figure: dict[str, Any] = {
        "workload": {
            "nodes": len(nodes),
            "cores_per_node": len(nodes[0].cpu_map),
            "memory_per_node_gib": nodes[0].memory / GIB,
            "request": raw_request,
            "mode": "auto",
            "instances": count,
            "pod": name,
            "total_capacity": sum(result.capacities.values()),
        },
        "median_ms": round(median, 3),
        "runs_ms": [round(value, 3) for value in times],
    }
    if go_ms is not None:
        figure["go_eru_ms"] = go_ms
        figure["ratio_to_go"] = round(median / go_ms, 4)
    return figure


def capacity_case(
    nodes: list[NodeResources], raw_request: dict[str, Any], claim: str, claim_ms: float, runs: int
) -> dict[str, Any]:
    """Capacity of every node (the white paper's "how many containers fit" figures)."""
    request = normalize_request(raw_request, CONFIG)
    total = sum(node_capacities(nodes, request, CONFIG).values())
    median, times = median_ms(lambda: node_capacities(nodes, request, CONFIG), runs)
    return {
        "workload": {"nodes": len(nodes), "cores_per_node": len(nodes[0].cpu_map), "request": raw_request},
        "containers": total,
        "median_ms": round(median, 3),
        "runs_ms": [round(value, 3) for value in times],
        "white_paper_claim": claim,
        "ratio_to_claim": round(median / claim_ms, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--skip-white-paper", action="store_true", help="Only the 1,000-node pipeline figures.")
    args = parser.parse_args()
    bind = {"cpu_bind": True, "cpu_request": 1.5, "memory_request": GIB}
    memory_prime = {"cpu_bind": False, "cpu_request": 1.5, "memory_request": GIB}
    idle = idle_nodes(1_000, 32, 64 * GIB)
    varied = varied_nodes(1_000, 32, 64 * GIB)
    figures: dict[str, Any] = {
        "cpu_bind_pipeline_idle": pipeline_case("idle", idle, bind, 10_000, 1037.0, args.runs),
        "cpu_bind_pipeline_varied": pipeline_case("varied", varied, bind, 10_000, 1037.0, args.runs),
        "memory_prime_pipeline_idle": pipeline_case("idle", idle, memory_prime, 10_000, 18.3, args.runs),
        "memory_prime_pipeline_varied": pipeline_case("varied", varied, memory_prime, 10_000, 18.3, args.runs),
    }
    if not args.skip_white_paper:
        big_idle = idle_nodes(10_000, 32, 1024 * GIB)
        figures["white_paper_memory_prime_capacity_10k_nodes"] = capacity_case(
            big_idle, {"cpu_request": 1, "memory_request": GIB}, "10.24 M containers under 60 ms", 60.0, args.runs
        )
        cpu_nodes = idle_nodes(10_000, 24, 64 * GIB)
        figures["white_paper_cpu_prime_capacity_10k_nodes"] = capacity_case(
            cpu_nodes, {"cpu_bind": True, "cpu_request": 1.3}, "180 K containers about 400 ms", 400.0, args.runs
        )
        spread = pipeline_case("idle", idle_nodes(10_000, 32, 64 * GIB), memory_prime, 10_000, None, args.runs)
        spread["white_paper_claim"] = "even spread about 70 ms"
        spread["ratio_to_claim"] = round(spread["median_ms"] / 70.0, 4)
        figures["white_paper_even_spread_10k_nodes"] = spread
    print(
        json.dumps(
            {
                "benchmark": "full deploy pipeline: capacities, placement, concrete plans (plan_deploy)",
                "statistic": "median of runs, one call per run, after a warm-up call",
                "runs": args.runs,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "figures": figures,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
