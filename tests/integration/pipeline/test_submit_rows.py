"""`PgPodSession.submit` writes a batch's decisions, deploys, containers and outbox rows in ONE statement
(store.sql.INSERT_BATCH_ROWS_SQL), on a real PostgreSQL: foreign keys hold within the statement, the outbox keeps the
batch's order, a request key committed meanwhile is a `Conflict` with nothing of the batch written, and a row that
breaks a constraint fails the whole batch."""

from __future__ import annotations

import json

import asyncpg
import pytest

from eru.bus import new_envelope
from eru.domain import DeployEvent
from eru.store import transaction
from eru.store.protocol import Conflict, ContainerRow, DecisionRow, DeployRow, OutboxMessage, PodWrites, Usage
from eru_allocator.store.postgres import PgPodSession

NODE_SQL = "INSERT INTO nodes (name, pod, cpu_map, memory) VALUES ($1, 'p1', '{\"0\": 100}', 1073741824)"


def _batch(tag: str, nodes: list[str], request_ids: list[str]) -> PodWrites:
    writes = PodWrites()
    for index, request_id in enumerate(request_ids):
        deploy_id = f"{tag}-d{index}"
        writes.decisions.append(DecisionRow(f"{tag}-x{index}", "deploy", "{}", json.dumps({"index": index})))
        writes.deploys.append(DeployRow(deploy_id, request_id, "p1", "default", "planned", "{}", "{}"))
        for node in nodes:
            allocation = json.dumps({"cpu_map": {"0": 1}, "memory": 1})
            writes.containers.append(
                ContainerRow(f"{deploy_id}-{node}", deploy_id, node, "p1", "w", "busybox", "default", "prod", 0,
                             allocation, "{}", "planned", "{}", None)
            )  # fmt: skip
            writes.usage.setdefault(node, []).append(Usage({"0": 1}, 1, {}))
        event = DeployEvent(deploy_id=deploy_id, kind="planned", placements={n: 1 for n in nodes})
        envelope = new_envelope("eru.deploy.planned", "test")
        writes.messages.append(OutboxMessage(f"eru.deploy.{deploy_id}.planned", event, envelope))
    return writes


async def _setup(pool: asyncpg.Pool) -> None:
    await pool.execute("INSERT INTO pods (name) VALUES ('p1')")
    for name in ("n1", "n2"):
        await pool.execute(NODE_SQL, name)


async def test_a_batch_is_written_whole_with_its_outbox_in_order(store_pool: asyncpg.Pool) -> None:
    await _setup(store_pool)
    writes = _batch("a", ["n2", "n1"], [f"r{i}" for i in range(5)])
    async with transaction(store_pool) as conn:
        await PgPodSession(conn, "p1").submit(writes)
    assert await store_pool.fetchval("SELECT count(*) FROM decisions") == 5
    assert await store_pool.fetchval("SELECT count(*) FROM deploys") == 5
    assert await store_pool.fetchval("SELECT count(*) FROM containers WHERE state = 'planned'") == 10
    outbox = [row["subject"] for row in await store_pool.fetch("SELECT subject FROM outbox ORDER BY id")]
    assert outbox == [message.subject for message in writes.messages]
    used = await store_pool.fetch("SELECT name, used_memory FROM nodes ORDER BY name")
    assert [(row["name"], row["used_memory"]) for row in used] == [("n1", 5), ("n2", 5)]
    # a batch with only outbox rows (answers from the store) writes just those
    only = PodWrites(messages=_batch("b", [], ["r9"]).messages)
    async with transaction(store_pool) as conn:
        await PgPodSession(conn, "p1").submit(only)
    assert await store_pool.fetchval("SELECT count(*) FROM outbox") == 6
    assert await store_pool.fetchval("SELECT count(*) FROM deploys") == 5


async def test_a_request_key_committed_meanwhile_is_a_conflict_and_nothing_is_written(
    store_pool: asyncpg.Pool,
) -> None:
    await _setup(store_pool)
    async with transaction(store_pool) as conn:
        await PgPodSession(conn, "p1").submit(_batch("a", ["n1"], ["r1"]))
    with pytest.raises(Conflict):
        async with transaction(store_pool) as conn:
            await PgPodSession(conn, "p1").submit(_batch("b", ["n1", "n2"], ["r0", "r1"]))
    assert await store_pool.fetchval("SELECT count(*) FROM deploys WHERE id LIKE 'b-%'") == 0
    assert await store_pool.fetchval("SELECT count(*) FROM containers WHERE deploy_id LIKE 'b-%'") == 0
    assert await store_pool.fetchval("SELECT count(*) FROM outbox") == 1
    # the usage is charged in the same statement: only batch a's one container on n1
    used = await store_pool.fetch("SELECT name, used_memory, used_cpu_map FROM nodes ORDER BY name")
    assert [(row["name"], row["used_memory"]) for row in used] == [("n1", 1), ("n2", 0)]
    assert json.loads(used[0]["used_cpu_map"]) == {"0": 1}


async def test_a_container_on_an_unknown_node_fails_the_whole_batch(store_pool: asyncpg.Pool) -> None:
    await _setup(store_pool)
    with pytest.raises(asyncpg.ForeignKeyViolationError):
        async with transaction(store_pool) as conn:
            await PgPodSession(conn, "p1").submit(_batch("a", ["n1", "n9"], ["r1"]))
    for table in ("decisions", "deploys", "containers", "outbox"):
        assert await store_pool.fetchval(f"SELECT count(*) FROM {table}") == 0, table


async def test_policy_and_deploys_reads_what_the_two_reads_read_in_one_statement(store_pool: asyncpg.Pool) -> None:
    await _setup(store_pool)
    await store_pool.execute("UPDATE pods SET policy = '{\"allow_privileged\": false}' WHERE name = 'p1'")
    async with transaction(store_pool) as conn:
        await PgPodSession(conn, "p1").submit(_batch("a", ["n1"], ["r1", "r2"]))
    keys = ["r0", "r1", "r2"]
    async with transaction(store_pool) as conn:
        session = PgPodSession(conn, "p1")
        policy, found = await session.policy_and_deploys(keys)
        assert policy == {"allow_privileged": False} == await session.policy()
        assert found == await session.find_deploys(keys)
        assert sorted(found) == ["r1", "r2"]
        assert (found["r1"].id, found["r1"].status) == ("a-d0", "planned")
        assert await PgPodSession(conn, "nope").policy_and_deploys(keys) == (None, found)
