"""`eru explain` of a decision over thousands of nodes: its record (the batch's snapshot expanded) is larger than one
bus message, so `query decision` answers `reply_too_large`; with the stack's database at hand the CLI reads the record
itself and explains it, without it the one-line error says why. As a person runs it (docs/cli.md, docs/bus.md)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from pipeline_harness import ScriptedPipeline

from eru.bus import new_id

RECORD_BYTES = 3_000_000  # the snapshot's nodes as JSON: well over the 1 MiB max payload however it is encoded


def _eru(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "eru.cli", *args], capture_output=True, text=True, timeout=60)


async def test_explain_reads_a_decision_too_large_for_the_bus_from_the_database(
    scripted_pipeline: ScriptedPipeline, tmp_path: Path
) -> None:
    pipe, _ = await scripted_pipeline(("n1", "n2"))
    deploy_id = await pipe.deploy(count=2)
    await pipe.terminal(deploy_id)
    row = await pipe.pool.fetchrow(
        "SELECT d.input, d.output FROM decisions d JOIN deploys p ON p.result ->> 'decision_id' = d.id WHERE p.id = $1",
        deploy_id,
    )
    problem, output = json.loads(row["input"]), json.loads(row["output"])
    recorded = json.loads(
        await pipe.pool.fetchval("SELECT nodes FROM decision_snapshots WHERE id = $1", problem["snapshot"])
    )
    one = recorded["n1"]
    nodes = RECORD_BYTES // len(json.dumps(one)) + 1
    many = {f"big-{i:05d}": {**one, "name": f"big-{i:05d}"} for i in range(nodes)}
    snapshot, decision = new_id(), new_id()
    big = {**problem, "snapshot": snapshot}  # `snapshot_all`: every node of the snapshot, the added ones too
    if not problem.get("snapshot_all"):
        big["nodes"] = [*problem["nodes"], *many]
    big["snapshot_counts"] = {**problem.get("snapshot_counts", {}), **dict.fromkeys(many, 0)}
    async with pipe.pool.acquire() as conn, conn.transaction():
        await conn.execute(
            "INSERT INTO decision_snapshots (id, nodes) VALUES ($1, $2)", snapshot, json.dumps({**recorded, **many})
        )
        await conn.execute(
            "INSERT INTO decisions (id, kind, input, output) VALUES ($1, 'deploy', $2, $3)",
            decision, json.dumps(big), json.dumps(output),
        )  # fmt: skip
    where = ["--nats", pipe.nats_url, "--state-dir", str(tmp_path)]
    refused = await asyncio.to_thread(_eru, "explain", decision, *where)
    assert refused.returncode == 1
    assert "exceeds the bus's max payload" in refused.stderr
    assert "Traceback" not in refused.stderr
    explained = await asyncio.to_thread(_eru, "explain", decision, *where, "--database", pipe.dsn, "-o", "json")
    assert explained.returncode == 0, explained.stderr
    doc = json.loads(explained.stdout)
    assert doc["explained"] is True
    assert doc["decision_id"] == decision
    assert sum(entry["instances"] for entry in doc["placed"]) == 2
    assert doc["not_chosen_total"] >= 1000  # the big nodes, each read back from the snapshot
