"""Retention through the real pipeline: a finished deploy moves to history and stays answerable (dedupe, status),
then expires with an "expired at …" answer; `eru gc` and `eru replay` as a person runs them."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta
from typing import Any

import pytest
from pipeline_harness import pipeline_with_sim_nodes

from eru.bus import RemoteError
from eru.domain.messages import QueryRequest, RemoveRequest
from eru.store.retention import GcReport, bucket_seconds, collect

RETENTION = 7 * 86400  # the default, which the pipeline's allocator applies in its own passes meanwhile


async def _collect(pool: Any, at: datetime) -> GcReport:
    """A retention pass; when the allocator's own pass holds the lock at that moment, the next try."""
    for _ in range(100):
        report = await collect(pool, RETENTION, at=at)
        if report.ran:
            return report
        await asyncio.sleep(0.1)
    raise AssertionError("the retention lock stayed taken for 10 s")


def _eru(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    merged = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "eru.cli", *args], capture_output=True, text=True, timeout=60, env=merged
    )


async def test_a_finished_deploy_moves_stays_answerable_then_expires(nats_url: str, postgres_dsn: str) -> None:
    async with pipeline_with_sim_nodes(nats_url, postgres_dsn, count=2) as pipe:
        deploy_id = await pipe.deploy(request_id="keep-me", count=2)
        done = await pipe.terminal(deploy_id)
        decision_id = await pipe.pool.fetchval("SELECT result ->> 'decision_id' FROM deploys WHERE id = $1", deploy_id)
        await pipe.op("remove", RemoveRequest(container_ids=done.started))
        await pipe.wait_for(lambda: pipe.pool.fetchval("SELECT count(*) FROM containers WHERE state = 'removed'"), 2)
        now = await pipe.pool.fetchval("SELECT now()")
        dry = await asyncio.to_thread(
            _eru, "gc", "--dry-run", "--retention", str(RETENTION), "--database", postgres_dsn, "--nats", nats_url,
            "-o", "json",
        )  # fmt: skip
        assert dry.returncode == 0, dry.stderr
        shown = json.loads(dry.stdout)
        assert shown["schema"] == "eru.cli/gc"
        assert {s["stream"] for s in shown["storage"]["streams"]} >= {"ERU_DEPLOY", "ERU_NODE", "ERU_EVENTS"}
        assert all(s["max_bytes"] > 0 for s in shown["storage"]["streams"])
        assert await pipe.pool.fetchval("SELECT count(*) FROM containers") == 2  # a dry run changes nothing

        moved = await _collect(pipe.pool, at=now + timedelta(seconds=600))
        assert moved.moved == {"containers": 2, "deploys": 1}
        assert await pipe.pool.fetchval("SELECT count(*) FROM deploys") == 0
        # the same request again: answered with the deploy it made, from history — no second deploy
        assert await pipe.deploy(request_id="keep-me", count=2) == deploy_id
        assert await pipe.pool.fetchval("SELECT count(*) FROM deploys") == 0
        status = await pipe.op("query", QueryRequest(what="deploy", deploy_id="keep-me"))
        row = status.rows[0]
        assert row["deploy"]["id"] == deploy_id
        assert {c["id"] for c in row["containers"]} == set(done.started)

        later = now + timedelta(seconds=2 * RETENTION + 2 * bucket_seconds(RETENTION))
        expired = await _collect(pipe.pool, at=later)
        tables = {"decisions", "decision_snapshots", "deploys_history", "containers_history"}
        assert {d["table"] for d in expired.dropped} >= tables  # a batch's snapshot goes with its decisions
        assert await pipe.pool.fetchval("SELECT count(*) FROM deploys_history") == 0
        assert await pipe.pool.fetchval("SELECT count(*) FROM decision_snapshots") == 0
        with pytest.raises(RemoteError, match=rf"deploy '{deploy_id}' expired at"):
            await pipe.op("query", QueryRequest(what="deploy", deploy_id=deploy_id))
        with pytest.raises(RemoteError, match=rf"decision '{decision_id}' expired at"):  # what `eru explain` asks
            await pipe.op("query", QueryRequest(what="decision", decision_id=decision_id))
        replayed = await asyncio.to_thread(_eru, "replay", decision_id, "--database", postgres_dsn)
        assert replayed.returncode == 4  # not found any more (docs/cli.md "Exit codes")
        assert f"decision {decision_id} expired at" in replayed.stderr
        assert "Traceback" not in replayed.stderr


async def test_eru_gc_warns_before_a_stream_reaches_its_cap(nats_url: str, postgres_dsn: str, js: object) -> None:
    from eru.bus.streams import provision_streams, streams_for
    from eru.settings import load_settings

    await provision_streams(js, streams_for(load_settings(stream_max_bytes={"ERU_EVENTS": 1024 * 1024})))
    for _ in range(9):
        await js.publish("eru.container.n1.started", b"x" * 100_000)  # type: ignore[attr-defined]
    text = await asyncio.to_thread(_eru, "gc", "--database", postgres_dsn, "--nats", nats_url)
    assert text.returncode == 0, text.stderr
    assert "warning: stream ERU_EVENTS holds" in " ".join(text.stdout.split())
    bad = await asyncio.to_thread(_eru, "gc", "--retention", "5", "--database", postgres_dsn)
    assert bad.returncode == 2
    assert "--retention must be at least 60 seconds" in bad.stderr


async def test_eru_status_storage_says_how_tables_are_kept_and_warns_when_retention_is_not_running(
    postgres_dsn: str, store_pool: Any
) -> None:
    """Tables have an age, not a byte cap: `eru gc`/`eru status` show it per table, and warn when a table still holds
    a partition retention should have dropped (the passes are not running) — before the disk fills."""
    now = await store_pool.fetchval("SELECT now()")
    await collect(store_pool, 3600, at=now)  # partitions from an hour back, as a pass with a 1 h retention makes them
    env = {"ERU_RETENTION_SECONDS": "60"}  # …but the stack keeps a minute: the hour-old partitions are overdue
    shown = await asyncio.to_thread(_eru, "gc", "--dry-run", "--database", postgres_dsn, "-o", "json", env=env)
    assert shown.returncode == 0, shown.stderr
    storage = json.loads(shown.stdout)["storage"]
    kept = {row["table"]: row["kept"] for row in storage["tables"]}
    assert kept["decisions"] == "retention"
    assert kept["containers"].startswith("live")
    overdue = "table containers_history still holds a partition that ended"
    assert any(w.startswith(overdue) for w in storage["warnings"]), storage["warnings"]
    text = await asyncio.to_thread(_eru, "gc", "--dry-run", "--database", postgres_dsn, env={**env, "COLUMNS": "200"})
    assert "retention 1 min" in text.stdout
    assert f"warning: {overdue}" in " ".join(text.stdout.split())
    calm = await asyncio.to_thread(_eru, "gc", "--dry-run", "--database", postgres_dsn, "-o", "json")
    assert not [w for w in json.loads(calm.stdout)["storage"]["warnings"] if w.startswith("table")]  # 7 days: fine


async def test_a_request_id_is_remembered_while_a_stream_can_redeliver_it_then_dropped(
    nats_url: str, postgres_dsn: str
) -> None:
    """docs/operations.md "How long a request id is remembered": past the history tables the settled row still
    answers a replay (no second deploy) until its window ends; then its partition is dropped whole."""
    from eru.settings import load_settings
    from eru.store.settled_retention import read_windows, windows_for

    short = 3600  # this test's retention passes: history is gone long before the settled window (the default's)
    async with pipeline_with_sim_nodes(nats_url, postgres_dsn, count=1) as pipe:
        deploy_id = await pipe.deploy(request_id="only-once", count=1)
        done = await pipe.terminal(deploy_id)
        await pipe.op("remove", RemoveRequest(container_ids=done.started))
        await pipe.wait_for(lambda: pipe.pool.fetchval("SELECT count(*) FROM containers WHERE state = 'removed'"), 1)
        now = await pipe.pool.fetchval("SELECT now()")
        expires = await pipe.pool.fetchval("SELECT expires_at FROM settled_requests WHERE request_id = 'only-once'")
        async with pipe.pool.acquire() as conn:
            windows = await read_windows(conn)
        assert windows == windows_for(load_settings(), 5)  # what the allocator wrote from its settings
        assert abs((expires - now).total_seconds() - windows.accepted_seconds) < 60

        async def collect_at(at: datetime) -> GcReport:
            for _ in range(100):
                report = await collect(pipe.pool, short, at=at)
                if report.ran:
                    return report
                await asyncio.sleep(0.1)
            raise AssertionError("the retention lock stayed taken for 10 s")

        await collect_at(now + timedelta(seconds=600))  # to history
        inside = now + timedelta(seconds=2 * short + 2 * bucket_seconds(short))
        report = await collect_at(inside)
        assert "deploys_history" in {d["table"] for d in report.dropped}
        assert await pipe.pool.fetchval("SELECT count(*) FROM settled_requests WHERE request_id = 'only-once'") == 1
        assert await pipe.pool.fetchval("SELECT count(*) FROM deploys_history WHERE request_id = 'only-once'") == 0
        # replayed inside the window: answered with the deploy it made, nothing deployed twice
        assert await pipe.deploy(request_id="only-once", count=1) == deploy_id
        assert await pipe.pool.fetchval("SELECT count(*) FROM deploys") == 0
        assert await pipe.pool.fetchval("SELECT count(*) FROM containers") == 0

        past = expires + timedelta(seconds=4 * bucket_seconds(windows.accepted_seconds) + 60)
        report = await collect_at(past)
        gone = report.dropped + [
            {"table": t} for t, n in report.default_rows_deleted.items() if t == "settled_requests" and n
        ]
        assert "settled_requests" in {d["table"] for d in gone}
        assert await pipe.pool.fetchval("SELECT count(*) FROM settled_requests WHERE request_id = 'only-once'") == 0
        assert (
            await pipe.pool.fetchval("SELECT count(*) FROM retention_drops WHERE table_name = 'settled_requests'") >= 1
        )
