"""Placement alone (docs/placement-modes.md): 10,000 new instances over 1,000 nodes, per mode, against Go Eru's figures.

Prints one JSON document. `place_ms` is `place(mode, slots, request)` with the slots already built as a list of
`NodeSlot` (so their conversion to columns and all validation are inside the figure); `place_arrays_ms` is the array
fast path given ready columns. Each figure is the median of `runs` runs; a run times `calls_per_run` calls and divides.
Usage: python bench/bench_placement.py [--runs 7]
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import random
import statistics
import timeit
from collections.abc import Callable
from typing import Any

import numpy as np

from eru.planning.modes import NodeSlot, PlacementRequest, place, place_arrays

NODES = 1_000
INSTANCES = 10_000
SEED = 20240601
GO_ERU_MS = {"auto": 2.8, "global": 2.6, "each": 0.13, "fill": 0.14, "drained": 0.18}


def workload(mode: str) -> tuple[list[NodeSlot], PlacementRequest, dict[str, Any]]:
    """Nodes and request for one mode; every mode places exactly INSTANCES new instances."""
    rng = random.Random(f"{SEED}-{mode}")
    names = [f"node-{index:04d}" for index in range(NODES)]
    if mode == "each":
        per_node = INSTANCES // NODES
        slots = [NodeSlot(name, rng.randint(per_node, 40), rng.randint(0, 10)) for name in names]
        return slots, PlacementRequest(per_node), {"capacity": [per_node, 40], "count_per_node": per_node}
    if mode == "fill":
        existing = [rng.randint(0, 10) for _ in names]
        target = 15
        gap = INSTANCES - sum(target - count for count in existing)
        existing = _adjust_to_gap(existing, gap, target)
        slots = [NodeSlot(name, rng.randint(target, 40), count) for name, count in zip(names, existing, strict=True)]
        return slots, PlacementRequest(target), {"capacity": [target, 40], "existing": [0, 10], "fill_to": target}
    slots = [
        NodeSlot(name, rng.randint(5, 40), rng.randint(0, 10), rng.uniform(0.0, 0.8), rng.uniform(0.0005, 0.002))
        for name in names
    ]
    parameters = {"capacity": [5, 40], "existing": [0, 10], "usage": [0.0, 0.8], "rate": [0.0005, 0.002]}
    return slots, PlacementRequest(INSTANCES), parameters


def _adjust_to_gap(existing: list[int], gap: int, target: int) -> list[int]:
    """Nudge existing counts so that filling every node to `target` needs `gap` more instances than before."""
    adjusted = list(existing)
    index = 0
    while gap:
        if gap > 0 and adjusted[index] > 0:  # fewer existing → more to fill
            adjusted[index] -= 1
            gap -= 1
        elif gap < 0 and adjusted[index] < target - 1:
            adjusted[index] += 1
            gap += 1
        index = (index + 1) % len(adjusted)
    return adjusted


def median_ms(call: Callable[[], object], runs: int) -> tuple[float, int]:
    """Median over `runs` of the per-call time in ms, with enough calls per run to last ~0.2 s."""
    call()
    single = timeit.timeit(call, number=1)
    calls = max(1, int(0.2 / max(single, 1e-6)))
    times = timeit.repeat(call, number=calls, repeat=runs)
    return statistics.median(t / calls for t in times) * 1e3, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    results: dict[str, Any] = {}
    for mode, go_ms in GO_ERU_MS.items():
        slots, request, parameters = workload(mode)
        placed = place(mode, slots, request)
        assert sum(placed.values()) == INSTANCES, (mode, sum(placed.values()))
        columns = (
            [s.name for s in slots],
            np.array([s.capacity for s in slots]),
            np.array([s.count for s in slots]),
            np.array([s.usage for s in slots]),
            np.array([s.rate for s in slots]),
        )
        assert place_arrays(mode, *columns, request) == placed
        place_ms, calls = median_ms(functools.partial(place, mode, slots, request), args.runs)
        arrays_ms, _ = median_ms(functools.partial(place_arrays, mode, *columns, request), args.runs)
        results[mode] = {
            "workload": {
                "nodes": NODES,
                "instances": INSTANCES,
                "nodes_receiving": len(placed),
                "count": request.count,
                "nodes_limit": request.nodes_limit,
                "random_ranges": parameters,
                "seed": SEED,
            },
            "place_ms": round(place_ms, 4),
            "place_arrays_ms": round(arrays_ms, 4),
            "go_eru_ms": go_ms,
            "ratio_to_go": round(place_ms / go_ms, 3),
            "runs": args.runs,
            "calls_per_run": calls,
        }
    print(
        json.dumps(
            {
                "benchmark": "placement modes, placement alone",
                "statistic": "median of runs, per call",
                "python": platform.python_version(),
                "numpy": np.__version__,
                "machine": platform.machine(),
                "modes": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
