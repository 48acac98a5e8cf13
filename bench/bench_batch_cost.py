"""One deploy batch's cost as the pod grows (docs/planning.md "Per-batch cost"), in process.

The same batch — `--requests` requests of `--containers` containers (mode auto, 0.25 cores + 512 MiB each, as
bench/bench_scale.py sends) — is planned against pods of 100, 1,000 and 5,000 nodes of 32 cores / 64 GiB, after
`--warm` earlier batches charged the pod (steady state: the node cache and the texts of unchanged nodes are warm).
Per batch, for each pod size:

* `snapshot`: the allocator's node cache turning `eru_open_deploy_batch_since`'s node rows into the snapshot's
  nodes (`NodeCache.from_changes`: only the rows the previous batch changed come back, whole; older code:
  `NodeCache.from_rows`, a narrow row per other node), and the bytes of the node rows and of what the allocator
  sends to say which rows it holds;
* `plan`: the batch's requests through `eru_allocator.deploy.decision.plan_one` (stage, record, the predicted
  placement, conclude, rows, commands) and `finish`, and the `place_batch` bodies encoded; split into
  `record` (`RecordBook.record` and `RecordBook.snapshot`: the decision records and the stored snapshot row),
  `encode` (the placement input as columns or slots, its wire form, the bodies' msgpack) and `decide` (the rest:
  analyses, filters, the predicted placement, conclude, the charged snapshot, rows);
* `distributor`: the bytes of the `place_batch` request(s) and the distributor's CPU to decode, validate and answer
  them (`eru.planning.distribute.decide_many`);
* `record`: the bytes of the batch's decision records (`record_bytes` their inputs, `record_output_bytes` their
  answers) and of its stored snapshot row.

    python bench/bench_batch_cost.py [--nodes 100,1000,5000] [--requests 4] [--containers 100] [--runs 5]

Prints JSON: per size, the median over `--runs` batches of each part's CPU ms and bytes, and the ratio of the
largest size's total CPU to the smallest's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from eru.bus import new_envelope
from eru.bus.codec import MSGPACK, decode_value, encode_value
from eru.domain import DeployRequest, PlaceBatchRequest
from eru.logging import configure_logging
from eru.planning import NodeResources, PlanningConfig
from eru.planning.decide import Staged
from eru.planning.decision_record import RecordBook

try:
    from eru.planning.decision_record import SnapshotChain
except ImportError:  # pragma: no cover  # older code (a before/after run)
    SnapshotChain = None  # type: ignore[assignment,misc]
from eru.planning.distribute import decide_many
from eru.planning.snapshot import ClusterSnapshot
from eru_allocator.deploy import placing
from eru_allocator.deploy.context import Context
from eru_allocator.deploy.decision import PodPlan, plan_one
from eru_allocator.deploy.placing import PredictingPlacer
from eru_allocator.deploy.requests import validate
from eru_allocator.store.node_cache import NodeCache

try:  # the chunks `PredictingPlacer.confirm` sends (older code: one chunk, for a before/after run)
    from eru_allocator.deploy.placing import batch_wire
except ImportError:  # pragma: no cover

    def batch_wire(asks: list[dict[str, Any]]) -> list[dict[str, Any]]:  # type: ignore[misc]
        chunks: list[list[dict[str, Any]]] = [[]]
        slots = 0
        for ask in asks:
            if chunks[-1] and slots + len(ask["slots"]) > 8000:
                chunks.append([])
                slots = 0
            chunks[-1].append(ask)
            slots += len(ask["slots"])
        return [{"asks": chunk} for chunk in chunks]


PARTS: dict[str, int] = {"record": 0, "encode": 0}
"""CPU ns spent in the wrapped functions of each part since the last reset."""


def _timed(part: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.process_time_ns()
        try:
            return function(*args, **kwargs)
        finally:
            PARTS[part] += time.process_time_ns() - started

    return wrapper


def _instrument() -> None:
    """Wrap the functions of the `record` and `encode` parts (whichever of them this code has)."""
    placing.place_wire = _timed("encode", placing.place_wire)  # type: ignore[assignment]
    RecordBook.record = _timed("record", RecordBook.record)  # type: ignore[method-assign]
    RecordBook.snapshot = _timed("record", RecordBook.snapshot)  # type: ignore[method-assign]
    for method in ("columns", "slots"):
        if hasattr(Staged, method):
            setattr(Staged, method, _timed("encode", getattr(Staged, method)))


CONFIG = PlanningConfig()
CORES = 32
MEMORY = 64 << 30


def _node(index: int) -> NodeResources:
    return NodeResources(f"sim-{index:05d}", {str(core): 100 for core in range(CORES)}, MEMORY)


def _request(index: int, containers: int) -> DeployRequest:
    return DeployRequest.model_validate(
        {
            "pod": "default",
            "mode": "auto",
            "count": containers,
            "request_id": f"r{index}",
            "workload": {
                "name": f"w{index % 10}",
                "image": "busybox",
                "resources": {"cpu_request": 0.25, "memory_request": "512MiB"},
            },
        }
    )


def _row(node: NodeResources, version: int, whole: bool) -> dict[str, Any]:
    """A `node` row of `eru_open_deploy_batch` as asyncpg hands it over (whole: every column, as JSON text)."""
    row: dict[str, Any] = {"name": node.name, "t1": str(1000 + version), "n1": version, "j1": None, "j2": None}
    row["t2"] = "full" if whole else None
    if whole:
        row.update(
            j3=json.dumps(dict(node.cpu_map)),
            n2=node.memory,
            j4="{}",
            j5="{}",
            j6=json.dumps(dict(node.used_cpu_map)),
            n3=node.used_memory,
            j7=json.dumps(dict(node.used_numa_memory)),
        )
    return row


def _row_bytes(row: dict[str, Any]) -> int:
    return sum(len(str(value)) for value in row.values() if value is not None)


class _Conn:
    async def fetch(self, *args: Any) -> list[Any]:
        raise AssertionError("every changed row is sent whole in this bench")


async def _batch(
    ctx: Context, cache: NodeCache, snapshot: ClusterSnapshot, versions: dict[str, int], changed: set[str], args: Any
) -> tuple[dict[str, Any], ClusterSnapshot, set[str]]:
    """One batch: the snapshot read (the rows `changed` whole), its requests planned, the distributor's answer."""
    figures: dict[str, Any] = {}
    by_name = {node.name: node for node in snapshot.nodes}
    if hasattr(cache, "from_changes"):  # the rows changed since the cache's horizon (older code: every row)
        horizon = str(1000 + sum(versions.values()))
        rows = [_row(by_name[name], versions[name], True) for name in sorted(changed)]
        for row in rows:
            row.update(t2="default", t3=None)
        parts = {"horizon": [{"t1": horizon}], "node": rows}
        figures["snapshot_rows_bytes"] = sum(_row_bytes(row) for row in rows)
        figures["snapshot_known_bytes"] = len(horizon)
        started = time.process_time_ns()
        nodes, _ = cache.from_changes("default", parts)
        figures["snapshot_ms"] = (time.process_time_ns() - started) / 1e6
    else:  # pragma: no cover  # older code, for a before/after run
        names, xmins, _ = cache.known()  # type: ignore[attr-defined]
        rows = [_row(by_name[name], versions[name], name in changed) for name in sorted(by_name)]
        figures["snapshot_rows_bytes"] = sum(_row_bytes(row) for row in rows)
        figures["snapshot_known_bytes"] = sum(len(n) + len(x) + 8 for n, x in zip(names, xmins, strict=True))
        started = time.process_time_ns()
        nodes, _ = await cache.from_rows(_Conn(), rows)  # type: ignore[attr-defined]
        figures["snapshot_ms"] = (time.process_time_ns() - started) / 1e6
    snapshot = ClusterSnapshot(config=CONFIG, nodes=tuple(nodes), counts=snapshot.counts, pod="default")

    items = []
    for index in range(args.requests):
        req = _request(index, args.containers)
        items.append((req, validate(req, CONFIG), new_envelope("eru.deploy.request", "bench")))
    PARTS.update(record=0, encode=0)
    started = time.process_time_ns()
    analyses = getattr(ctx, "analyses", None)  # kept across batches (older code: one cache per batch)
    chains = getattr(ctx, "chains", None)  # the stored snapshot as a change of the last full one (older: full)
    if chains is not None:
        state = PodPlan(None, snapshot, ctx.node_texts, analyses, chains.setdefault("default", SnapshotChain()))
    elif analyses is not None:
        state = PodPlan(None, snapshot, ctx.node_texts, analyses)
    else:
        state = PodPlan(None, snapshot, ctx.node_texts)
    placer = PredictingPlacer()
    state.placer = placer
    for req, normalized, envelope in items:
        await plan_one(ctx, state, req, normalized, envelope, req.request_id or "")
    writes = state.finish()
    encoding = time.process_time_ns()
    wire = [encode_value(body) for body in batch_wire(placer.asks)]
    PARTS["encode"] += time.process_time_ns() - encoding
    figures["plan_ms"] = (time.process_time_ns() - started) / 1e6
    figures["record_ms"] = PARTS["record"] / 1e6
    figures["encode_ms"] = PARTS["encode"] / 1e6
    figures["decide_ms"] = figures["plan_ms"] - figures["record_ms"] - figures["encode_ms"]
    figures["distributor_request_bytes"] = sum(len(data) for data in wire)
    started = time.process_time_ns()
    for data in wire:
        decide_many(PlaceBatchRequest.model_validate(decode_value(data, MSGPACK)))
    figures["distributor_ms"] = (time.process_time_ns() - started) / 1e6
    if hasattr(state.records, "stored"):
        state.records.stored()  # as `commit_batch` does once the batch is committed
    figures["record_bytes"] = sum(len(row.input) for row in writes.decisions)
    figures["record_output_bytes"] = sum(len(row.output) for row in writes.decisions)
    figures["record_snapshot_bytes"] = sum(len(row.nodes) for row in writes.decision_snapshots)
    figures["cpu_ms"] = figures["snapshot_ms"] + figures["plan_ms"] + figures["distributor_ms"]
    figures["bytes"] = (
        figures["snapshot_rows_bytes"]
        + figures["snapshot_known_bytes"]
        + figures["distributor_request_bytes"]
        + figures["record_bytes"]
        + figures["record_output_bytes"]
        + figures["record_snapshot_bytes"]
    )
    after = state.snapshot
    now_changed = {new.name for old, new in zip(snapshot.nodes, after.nodes, strict=True) if old is not new}
    for name in now_changed:
        versions[name] += 1
    return figures, after, now_changed


async def _size(nodes: int, args: Any) -> dict[str, Any]:
    ctx = Context(
        store=None,  # type: ignore[arg-type]  # planning only: nothing is submitted
        bus=None,  # type: ignore[arg-type]  # the predicting placer answers in process
        config=CONFIG,
        source="bench",
        place_timeout_seconds=5.0,
        node_down_after_seconds=30.0,
    )
    cache = NodeCache()
    snapshot = ClusterSnapshot(config=CONFIG, nodes=tuple(_node(i) for i in range(nodes)), pod="default")
    versions = {node.name: 1 for node in snapshot.nodes}
    changed = set(versions)  # the first read parses every row
    runs: list[dict[str, Any]] = []
    for batch in range(args.warm + args.runs):
        figures, snapshot, changed = await _batch(ctx, cache, snapshot, versions, changed, args)
        if batch >= args.warm:
            runs.append(figures)
    median = {key: round(statistics.median(run[key] for run in runs), 3) for key in runs[0]}
    return {"nodes": nodes, **median}


def main() -> None:
    """Run the bench and print its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,1000,5000")
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--containers", type=int, default=100)
    parser.add_argument("--warm", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    configure_logging("bench", "bench", log_format="json", level="warning")
    _instrument()
    sizes = [asyncio.run(_size(int(n), args)) for n in args.nodes.split(",")]
    result = {
        "bench": "batch_cost",
        "batch": {"requests": args.requests, "containers": args.containers, "mode": "auto"},
        "sizes": sizes,
        "cpu_ratio_largest_vs_smallest": round(sizes[-1]["cpu_ms"] / sizes[0]["cpu_ms"], 2),
        "bytes_ratio_largest_vs_smallest": round(sizes[-1]["bytes"] / sizes[0]["bytes"], 2),
    }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
