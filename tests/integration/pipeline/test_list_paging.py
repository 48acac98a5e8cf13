"""Every list query pages like nodes and containers (docs/bus.md, paging): deploys, tenant-ls and
tenant-reservations through the real allocator on a real nats-server and PostgreSQL. Rows are inserted directly so
that several pages are needed without deploying thousands of containers; `all_pages` (what `eru … ls` uses) and the
`eru deploy ls` command follow every page; asking for more than a page is an error naming `limit`, never a timeout."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
import pytest_asyncio
from pipeline_harness import Pipeline
from pydantic import BaseModel

from eru.bus import RemoteError, request
from eru.bus.subjects import tenant_operation
from eru.cli.bus_client import all_pages
from eru.domain.messages import PAGE_SIZE, OperationReply, QueryRequest
from eru.domain.tenants import TenantListRequest, TenantReservationsRequest

BASE = datetime.now(UTC) - timedelta(hours=1)


@pytest_asyncio.fixture
async def pipe(nats_url: str, postgres_dsn: str) -> AsyncIterator[Pipeline]:
    pipeline = Pipeline(nats_url, postgres_dsn)
    await pipeline.start(distributor=False)
    try:
        yield pipeline
    finally:
        await pipeline.close()


async def _insert_deploys(pipe: Pipeline, count: int, *, tenant: str = "default", image_bytes: int = 0) -> None:
    """`count` deploys of `tenant`, three per millisecond (so that the id breaks ties of creation time)."""
    image = "busybox" + "x" * image_bytes
    rows = [
        (
            f"{tenant.replace('/', '-')}-d{i:05d}",
            f"{tenant}/r{i}",
            "p1",
            tenant,
            "completed",
            json.dumps({"count": 1, "workload": {"name": f"w{i}", "image": image, "tenant": tenant}}),
            BASE + timedelta(milliseconds=i // 3),
        )
        for i in range(count)
    ]
    await pipe.pool.executemany(
        "INSERT INTO deploys (id, request_id, pod, tenant, status, request, created_at) "
        "VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7)",
        rows,
    )


async def _pages(pipe: Pipeline, name: str, first: BaseModel) -> list[OperationReply]:
    pages = [await pipe.op(name, first)]
    while pages[-1].next_cursor is not None:
        pages.append(await pipe.op(name, first.model_copy(update={"cursor": pages[-1].next_cursor})))
    return pages


async def test_deploys_page_newest_first_and_no_page_exceeds_the_byte_budget(pipe: Pipeline) -> None:
    await _insert_deploys(pipe, 1_234)
    pages = await _pages(pipe, "query", QueryRequest(what="deploys"))
    assert [len(page.rows) for page in pages] == [500, 500, 234]
    expected = [r["id"] for r in await pipe.pool.fetch("SELECT id FROM deploys ORDER BY created_at DESC, id DESC")]
    assert [row["id"] for page in pages for row in page.rows] == expected
    everything = await all_pages(pipe.nc, "query", QueryRequest(what="deploys"), 10.0, progress=False)
    assert [row["id"] for row in everything.rows] == expected
    newest = await all_pages(pipe.nc, "query", QueryRequest(what="deploys", limit=7), 10.0, max_rows=10)
    assert [row["id"] for row in newest.rows] == expected[:10]

    # Rows of ~3 KB each: a page stops at 512 KiB of rows, far below the bus's 1 MiB, whatever `limit` says.
    await pipe.pool.execute("DELETE FROM deploys")
    await _insert_deploys(pipe, 600, image_bytes=3_000)
    big = await _pages(pipe, "query", QueryRequest(what="deploys", pod="p1"))
    sizes = [len(page.rows) for page in big]
    assert len(big) >= 4, sizes
    assert sum(sizes) == 600
    assert max(sizes) < PAGE_SIZE
    row_bytes = [sum(len(json.dumps(row, separators=(",", ":"))) for row in page.rows) for page in big]
    assert max(row_bytes) <= 512 * 1024, row_bytes


async def test_a_tenant_pages_through_its_own_deploys_only(pipe: Pipeline) -> None:
    await pipe.pool.execute("INSERT INTO tenants (name) VALUES ('a'), ('b') ON CONFLICT DO NOTHING")
    await pipe.pool.execute("INSERT INTO tenants (name, parent) VALUES ('a/web', 'a')")
    await _insert_deploys(pipe, 300, tenant="a")
    await _insert_deploys(pipe, 300, tenant="a/web")
    await _insert_deploys(pipe, 50, tenant="b")

    async def ask(model: QueryRequest) -> OperationReply:
        return await request(pipe.nc, tenant_operation("a", "query"), model, OperationReply, 10)

    first = await ask(QueryRequest(what="deploys"))
    second = await ask(QueryRequest(what="deploys", cursor=first.next_cursor))
    assert (len(first.rows), len(second.rows), second.next_cursor) == (500, 100, None)
    tenants = {row["tenant"] for row in [*first.rows, *second.rows]}
    assert tenants == {"a", "a/web"}


async def test_asking_for_more_than_a_page_or_a_forged_cursor_is_an_error_naming_the_field(pipe: Pipeline) -> None:
    for subject, body in [
        ("eru.allocator.query", {"what": "deploys", "limit": PAGE_SIZE + 1}),
        ("eru.allocator.tenant-ls", {"limit": 100_000}),
        ("eru.allocator.tenant-reservations", {"limit": 0}),
    ]:
        reply = await pipe.nc.request(
            subject, json.dumps(body).encode(), headers={"Content-Type": "application/json"}, timeout=10
        )
        assert b"error" in reply.data, (subject, reply.data)
        assert b"limit" in reply.data, (subject, reply.data)
    with pytest.raises(RemoteError, match="cursor"):
        await pipe.op("query", QueryRequest(what="deploys", cursor="WyJub3QgYSB0aW1lIiwieCJd"))  # ["not a time","x"]
    with pytest.raises(RemoteError, match="cursor"):
        await pipe.op("tenant-ls", TenantListRequest(cursor="bm9wZQ"))


async def test_tenant_ls_pages_keep_each_tenants_groups_right_after_it(pipe: Pipeline) -> None:
    names = [f"t{i:04d}" for i in range(700)]
    groups = [f"{name}/g{j}" for name in names[:120] for j in range(2)]
    await pipe.pool.executemany("INSERT INTO tenants (name) VALUES ($1)", [(n,) for n in names])
    await pipe.pool.executemany(
        "INSERT INTO tenants (name, parent) VALUES ($1, $2)", [(g, g.split("/")[0]) for g in groups]
    )
    pages = await _pages(pipe, "tenant-ls", TenantListRequest())
    assert [len(page.rows) for page in pages] == [500, 441]  # 700 tenants + 240 groups + default
    listed = [row["name"] for page in pages for row in page.rows]
    expected = [
        item
        for name in sorted([*names, "default"])
        for item in [name, *sorted(g for g in groups if g.startswith(name + "/"))]
    ]
    assert listed == expected
    small = await all_pages(pipe.nc, "tenant-ls", TenantListRequest(limit=97), 10.0, progress=False)
    assert [row["name"] for row in small.rows] == expected  # cursors that fall between a tenant and its groups


async def test_tenant_reservations_page(pipe: Pipeline) -> None:
    for node in ("n1", "n2", "n3"):
        await pipe.register(node, cores=64)
    names = [f"r{i:03d}" for i in range(210)]
    await pipe.pool.executemany("INSERT INTO tenants (name) VALUES ($1)", [(n,) for n in names])
    await pipe.pool.executemany(
        "INSERT INTO tenant_reservations (tenant, node, cpu, memory) VALUES ($1, $2, 0.1, 0)",
        [(name, node) for name in names for node in ("n1", "n2", "n3")],
    )
    pages = await _pages(pipe, "tenant-reservations", TenantReservationsRequest())
    assert [len(page.rows) for page in pages] == [500, 130]
    listed = [(row["tenant"], row["node"]) for page in pages for row in page.rows]
    assert listed == [(name, node) for name in names for node in ("n1", "n2", "n3")]


async def test_eru_deploy_ls_follows_every_page(pipe: Pipeline) -> None:
    await _insert_deploys(pipe, 1_100)
    command = [sys.executable, "-m", "eru.cli", "deploy", "ls", "--nats", pipe.nats_url, "-o", "json"]
    done = await asyncio.to_thread(subprocess.run, command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert len(document["deploys"]) == 1_100
    assert document["deploys"][0]["id"] == "default-d01099"
    limited = await asyncio.to_thread(
        subprocess.run, [*command, "--limit", "3"], capture_output=True, text=True, timeout=60, check=False
    )
    assert [row["id"] for row in json.loads(limited.stdout)["deploys"]] == [
        "default-d01099",
        "default-d01098",
        "default-d01097",
    ]
    table = await asyncio.to_thread(
        subprocess.run, [*command[:-2], "--limit", "2"], capture_output=True, text=True, timeout=60, check=False
    )
    assert table.returncode == 0, table.stderr
    assert "deploys (2)" in table.stdout
    assert "default-d01099" in table.stdout
    assert "default-d01097" not in table.stdout
