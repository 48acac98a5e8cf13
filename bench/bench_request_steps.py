"""One deploy request's steps on a large pod, in process (docs/planning.md "Per-batch cost"): CPU ms per step.

A pod of `--nodes` nodes of 32 cores / 64 GiB is charged by 12 requests of 100 containers (mode auto, 0.25 cores +
512 MiB, four workloads, as bench/bench_batch_cost.py sends), then `--requests` more are timed step by step with
`time.process_time_ns`: `stage` (with the analysis cache), `record` (the decision record, `RecordBook.record`),
`columns` (the placement input), `place` (the mode, `place_columns`), `conclude` (the plans materialized),
`answer` (the decision's answer as the allocator records it, built and as JSON: `Plan.recorded_answer`,
the capacity of the nodes placed on only) and `charged` (the snapshot the next request sees). Every eighth request's
charged snapshot becomes the next ones' input, so the pod keeps changing.

    python bench/bench_request_steps.py [--nodes 5000] [--requests 60]

Prints one JSON line: the nodes and, per step, the median CPU ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from eru.domain import DeployRequest
from eru.planning import NodeResources, PlanningConfig
from eru.planning.analysis_cache import AnalysisCache
from eru.planning.decide import conclude, stage
from eru.planning.decision_record import RecordBook
from eru.planning.distribute import place_columns
from eru.planning.plan import Plan
from eru.planning.snapshot import ClusterSnapshot
from eru_allocator.deploy.requests import ask_of, validate

CONFIG = PlanningConfig()


def _request(index: int) -> DeployRequest:
    return DeployRequest.model_validate(
        {
            "pod": "default",
            "mode": "auto",
            "count": 100,
            "request_id": f"r{index}",
            "workload": {
                "name": f"w{index}",
                "image": "busybox",
                "resources": {"cpu_request": 0.25, "memory_request": "512MiB"},
            },
        }
    )


def _recorded_answer(outcome: Plan) -> str:
    """The answer as the allocator records it, built and as JSON (older code: the full answer)."""
    recorded = getattr(outcome, "recorded_answer", outcome.answer)
    return json.dumps(recorded())


def main() -> None:
    """Run the bench and print its JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--requests", type=int, default=60)
    args = parser.parse_args()
    nodes = tuple(NodeResources(f"sim-{i:05d}", {str(c): 100 for c in range(32)}, 64 << 30) for i in range(args.nodes))
    snapshot = ClusterSnapshot(config=CONFIG, nodes=nodes, pod="default")
    cache = AnalysisCache()
    asks = [ask_of(req, validate(req, CONFIG)) for req in map(_request, range(4))]
    for index in range(12):  # warm: a charged pod, live counts per workload
        ask = asks[index % 4]
        staged = stage(snapshot, ask, cache)
        placed = place_columns(ask.mode, staged.columns(), ask.count, 0, dict(staged.options))
        outcome = conclude(staged, placed)
        assert isinstance(outcome, Plan)
        snapshot = snapshot.charged(ask, outcome.containers, outcome.placements)
    steps: dict[str, list[int]] = {}

    def timed(step: str, function: Callable[..., Any], *args: Any) -> Any:
        started = time.process_time_ns()
        result = function(*args)
        steps.setdefault(step, []).append(time.process_time_ns() - started)
        return result

    base, texts = snapshot.nodes, {}  # type: ignore[var-annotated]
    for index in range(args.requests):
        ask = asks[index % 4]
        book = RecordBook("bench", base, texts)
        staged = timed("stage", stage, snapshot, ask, cache)
        timed("record", book.record, staged)
        columns = timed("columns", staged.columns)
        placed = timed("place", place_columns, ask.mode, columns, ask.count, 0, dict(staged.options))
        outcome = timed("conclude", conclude, staged, placed)
        timed("answer", _recorded_answer, outcome)
        charged = timed("charged", snapshot.charged, ask, outcome.containers, outcome.placements)
        if index % 8 == 7:
            snapshot, base = charged, charged.nodes
    medians = {step: round(statistics.median(ns) / 1e6, 3) for step, ns in steps.items()}
    print(json.dumps({"bench": "request_steps", "nodes": args.nodes, "cpu_ms": medians}))


if __name__ == "__main__":
    main()
