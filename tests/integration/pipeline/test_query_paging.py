"""List queries page with a cursor through the real allocator: no reply exceeds the bus's max payload, the CLI's
`query_all` follows every page, and bad paging input is an error naming the field (docs/bus.md, paging)."""

from __future__ import annotations

import json

import pytest
from pipeline_harness import GiB, Pipeline, eru_cli, pipeline_with_scripted_agent

from eru.bus import RemoteError
from eru.cli.bus_client import query_all
from eru.domain.messages import PAGE_SIZE, QueryRequest

COUNT = 1_100  # more than two pages


async def _deploy_many(pipe: Pipeline) -> str:
    for name in ("big-1", "big-2"):
        await pipe.register(name, cores=64, memory=64 * GiB)
    workload = {"name": "tiny", "image": "busybox", "resources": {"cpu_request": 0.05, "memory_request": 16 << 20}}
    deploy_id = await pipe.deploy(count=COUNT, workload=workload)
    done = await pipe.terminal(deploy_id, within=60.0)
    assert done.kind == "completed", done
    return deploy_id


async def test_containers_and_a_deploy_page_by_cursor(nats_url: str, postgres_dsn: str) -> None:
    async with pipeline_with_scripted_agent(nats_url, postgres_dsn, nodes=("n1",), batched=True) as (pipe, _agent):
        deploy_id = await _deploy_many(pipe)

        first = await pipe.op("query", QueryRequest(what="containers", pod="p1"))
        assert len(first.rows) == PAGE_SIZE
        assert first.next_cursor is not None
        seen = [row["id"] for row in first.rows]
        cursor = first.next_cursor
        while cursor is not None:
            page = await pipe.op("query", QueryRequest(what="containers", pod="p1", cursor=cursor))
            seen += [row["id"] for row in page.rows]
            cursor = page.next_cursor
        ordered = await pipe.pool.fetch("SELECT id FROM containers ORDER BY node, created_at, id")
        expected = [row["id"] for row in ordered]
        assert seen == expected
        assert len(seen) == COUNT

        everything = await query_all(pipe.nc, QueryRequest(what="containers", pod="p1"), 10.0)
        assert [row["id"] for row in everything.rows] == expected
        story = await query_all(pipe.nc, QueryRequest(what="deploy", deploy_id=deploy_id), 10.0)
        (deploy_row,) = story.rows
        assert deploy_row["deploy"]["id"] == deploy_id
        assert sorted(row["id"] for row in deploy_row["containers"]) == sorted(expected)

        small = await query_all(pipe.nc, QueryRequest(what="nodes", limit=1), 10.0)
        assert [row["name"] for row in small.rows] == ["big-1", "big-2", "n1"]

        # as a person lists them: `eru container ls` and `eru deploy status` follow every page (exit 0)
        code, out = await eru_cli("container", "ls", "--nats", pipe.nats_url, "-o", "json")
        assert code == 0, out
        assert [row["id"] for row in json.loads(out)["containers"]] == expected
        code, out = await eru_cli("deploy", "status", deploy_id, "--nats", pipe.nats_url, "-o", "json")
        assert code == 0, out
        assert len(json.loads(out)["containers"]) == COUNT


async def test_bad_paging_input_is_an_error_naming_the_field(nats_url: str, postgres_dsn: str) -> None:
    async with pipeline_with_scripted_agent(nats_url, postgres_dsn, nodes=("n1",)) as (pipe, _agent):
        with pytest.raises(RemoteError, match="cursor"):
            await pipe.op("query", QueryRequest(what="containers", cursor="not-a-cursor"))
        with pytest.raises(RemoteError, match="cursor"):
            await pipe.op("query", QueryRequest(what="nodes", cursor="WyJhIiwiYiJd"))  # a cursor of two parts
        with pytest.raises(RemoteError, match="cursor"):  # three parts, but no timestamp in the middle
            await pipe.op("query", QueryRequest(what="containers", cursor="WyJhIiwiYiIsImMiXQ=="))
        with pytest.raises(ValueError, match="limit"):
            QueryRequest(what="containers", limit=PAGE_SIZE + 1)
        # A plain client sending a bigger limit than a page gets an answer naming the field, never a timeout.
        reply = await pipe.nc.request(
            "eru.allocator.query",
            json.dumps({"what": "containers", "limit": 100_000}).encode(),
            headers={"Content-Type": "application/json"},
            timeout=10,
        )
        assert b"limit" in reply.data
