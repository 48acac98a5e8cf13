"""The deploy-path benches run and measure what they say (bench/bench_deploy_store.py on a real PostgreSQL,
bench/bench_dead_letter_gate.py on a real nats-server), at a size of seconds: every request deploys, each round
and check has its CPU figures, and the statement counts come out when asked."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bench.bench_dead_letter_gate import run as run_gate
from bench.bench_deploy_store import run as run_store


async def test_the_store_bench_deploys_every_request_and_counts_each_round(tmp_path: Path) -> None:
    statements = tmp_path / "statements.json"
    args = argparse.Namespace(nodes=4, requests=30, batch=8, rounds=2, statements=str(statements))
    result = await run_store(args, tmp_path / "state")
    assert len(result["rounds"]) == 2
    for figures in result["rounds"]:
        assert figures["allocator_ms_per_request"] > 0
        assert figures["postgres_ms_per_request"] >= 0
        assert figures["statements_per_batch"] >= 4
    # the reads without the lock (eru_open_deploy_batch: decided and confirmed by the distributor meanwhile), the
    # session-level lock with the same reads to compare (eru_lock_and_open_deploy_batch), the rows with the nodes'
    # usage (committing by itself), the unlock after the answers (docs/pipeline.md "The pod lock and the
    # distributor"); the first round also holds asyncpg's type introspection and settings of the connection
    assert result["rounds"][-1]["statements_per_batch"] == 4
    rows = json.loads(statements.read_text())
    assert any("INSERT INTO decisions" in row["query"] for row in rows)


async def test_the_gate_bench_measures_each_check(tmp_path: Path) -> None:
    figures = await run_gate(20, tmp_path)
    assert figures["allocator_ms_per_check"] > 0
    assert figures["ms_per_container_at_5_per_batch"] > figures["ms_per_container_at_90_per_batch"]
