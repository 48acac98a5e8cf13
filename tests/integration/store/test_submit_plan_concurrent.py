"""`submit_plan` on a real PostgreSQL with two replicas (docs/pipeline.md "The deploy loop", worked example): A and B
decide against the same snapshot; B commits first and fills a node A's plan also charges; A's `submit_plan`
rejects exactly that node, commits A's other requests, and A's rejected request, decided again against the
refreshed snapshot, lands elsewhere. No node is ever charged beyond its cores, and every node's usage is the sum of
its live containers (the allocation invariant)."""

from __future__ import annotations

from typing import Any

import asyncpg

from eru.bus import new_envelope
from eru.bus.subjects import DISTRIBUTOR_PLACE_BATCH
from eru.domain import Accepted, DeployRequest
from eru.domain.messages import Heartbeat, SetNodeRequest
from eru.planning import PlanningConfig
from eru.planning.snapshot import ClusterSnapshot
from eru.store.protocol import SnapshotNeeds
from eru.testing.ledger_checks import usage_problems
from eru.testing.memory_bus import InMemoryBus, Message, place_batch_reply, serve_placement
from eru_allocator.deploy.context import Context
from eru_allocator.deploy.decision import PodPlan, plan_one
from eru_allocator.deploy.pipeline import commit_batch
from eru_allocator.deploy.placing import PredictingPlacer
from eru_allocator.deploy.requests import validate
from eru_allocator.nodes.registry import heartbeats, set_node
from eru_allocator.store.node_store import PgNodes
from eru_allocator.store.postgres import PgStore

POD = "race"
NODES = ["n1", "n2", "n3", "n4"]
CONFIG = PlanningConfig()
NEEDS = SnapshotNeeds(CONFIG, 3600.0, workloads=frozenset({"web"}))


def _items(tag: str, count: int) -> list[Any]:
    """`count` requests of one instance that binds both cores of a node (2 × 100 pieces)."""
    items = []
    for index in range(count):
        req = DeployRequest.model_validate(
            {
                "request_id": f"{tag}-{index}",
                "pod": POD,
                "count": 1,
                "mode": "auto",
                "workload": {
                    "name": "web",
                    "image": "busybox",
                    "resources": {"cpu_bind": True, "cpu_request": 2, "memory_request": "64MiB"},
                },
            }
        )
        items.append((req, validate(req, CONFIG), new_envelope("eru.deploy.request", "test")))
    return items


async def _decide(ctx: Context, snapshot: ClusterSnapshot, items: list[Any]) -> tuple[PodPlan, list[Any]]:
    """The requests decided in order against `snapshot`, placed as the distributor would (PredictingPlacer's local
    run of the same placement), one plan part each."""
    state = PodPlan(None, snapshot)
    state.placer = PredictingPlacer()
    answers = []
    for req, normalized, envelope in items:
        start = state.marks()
        answers.append(await plan_one(ctx, state, req, normalized, envelope, req.request_id))
        state.close_part(start)
    return state, answers


def _placed(state: PodPlan) -> list[str]:
    return [row.node for row in state.writes.containers]


async def _setup(pool: asyncpg.Pool) -> None:
    for name in NODES:
        await set_node(PgNodes(pool), SetNodeRequest(node=name, pod=POD, cpu_map={"0": 100, "1": 100}, memory=1 << 30))
    await heartbeats(PgNodes(pool), [Heartbeat(node=name, containers=[]) for name in NODES])


async def test_a_node_filled_by_another_replica_is_rejected_and_its_request_placed_elsewhere(
    store_pool: asyncpg.Pool,
) -> None:
    await _setup(store_pool)
    replica_a, replica_b = PgStore(store_pool), PgStore(store_pool)  # two replicas: each its own node cache
    bus = InMemoryBus()
    ctx_a = Context(replica_a, bus, CONFIG, "allocator/a", 5.0, 3600.0)
    ctx_b = Context(replica_b, bus, CONFIG, "allocator/b", 5.0, 3600.0)

    # both read the same state, and decide without holding the pod's lock (Nomad: the scheduler's snapshot)
    async with replica_a.pod(POD) as session:
        snapshot_a = await session.snapshot(NEEDS)
    async with replica_b.pod(POD) as session:
        snapshot_b = await session.snapshot(NEEDS)
    assert snapshot_a.nodes == snapshot_b.nodes
    plan_a, answers_a = await _decide(ctx_a, snapshot_a, _items("a", 3))
    plan_b, _ = await _decide(ctx_b, snapshot_b, _items("b", 1))
    assert _placed(plan_a) == ["n1", "n2", "n3"]
    assert _placed(plan_b) == ["n1"]  # B fills n1, which A's first request charges too

    async with replica_b.pod(POD) as session:
        committed_b = await session.submit_plan(plan_b.plan(POD, NEEDS))
    assert committed_b.full_commit
    assert committed_b.committed == (0,)

    async with replica_a.pod(POD) as session:
        result = await session.submit_plan(plan_a.plan(POD, NEEDS))
    assert result.rejected_nodes == {"n1": "cpu"}  # only the node that changed; n2 and n3 still fit
    assert result.committed == (1, 2)
    assert result.written is not None
    assert [row.request_id for row in result.written.deploys] == ["a-1", "a-2"]
    refreshed = result.refreshed_snapshot
    assert refreshed is not None
    used = {node.name: sum(node.used_cpu_map.values()) for node in refreshed.nodes}
    assert used == {"n1": 200, "n2": 200, "n3": 200, "n4": 0}  # B's and A's committed instances, read back

    # the rejected request decided again against the refreshed snapshot: the one node with room left
    again, answers_again = await _decide(ctx_a, refreshed, _items("a", 1))
    assert _placed(again) == ["n4"]
    async with replica_a.pod(POD) as session:
        final = await session.submit_plan(again.plan(POD, NEEDS))
    assert final.full_commit
    assert isinstance(answers_again[0], Accepted)
    assert all(isinstance(a, Accepted) for a in answers_a)

    rows = await store_pool.fetch("SELECT node, count(*) AS n FROM containers GROUP BY node ORDER BY node")
    assert {row["node"]: row["n"] for row in rows} == {"n1": 1, "n2": 1, "n3": 1, "n4": 1}
    assert await store_pool.fetchval("SELECT count(*) FROM deploys WHERE request_id = 'a-0'") == 1
    assert await usage_problems(store_pool) == []


async def test_a_plan_whose_every_node_was_taken_commits_nothing_and_changes_no_usage(
    store_pool: asyncpg.Pool,
) -> None:
    await _setup(store_pool)
    store = PgStore(store_pool)
    ctx = Context(store, InMemoryBus(), CONFIG, "allocator/a", 5.0, 3600.0)
    async with store.pod(POD) as session:
        snapshot = await session.snapshot(NEEDS)
    plan, _ = await _decide(ctx, snapshot, _items("c", 2))
    assert _placed(plan) == ["n1", "n2"]
    await store_pool.execute("UPDATE nodes SET cordoned = true WHERE name IN ('n1', 'n2')")
    before = await store_pool.fetch("SELECT name, used_cpu_map, version FROM nodes ORDER BY name")

    async with store.pod(POD) as session:
        result = await session.submit_plan(plan.plan(POD, NEEDS))

    assert result.rejected_nodes == {"n1": "cordoned", "n2": "cordoned"}
    assert result.committed == ()
    assert result.written is None
    assert await store_pool.fetch("SELECT name, used_cpu_map, version FROM nodes ORDER BY name") == before
    assert await store_pool.fetchval("SELECT count(*) FROM deploys") == 0
    assert await store_pool.fetchval("SELECT count(*) FROM outbox") == 0


async def test_the_pipeline_replans_on_postgres_what_a_node_cordoned_during_the_distributor_call_rejects(
    store_pool: asyncpg.Pool,
) -> None:
    """The allocator's own path (`commit_batch`: the deploy batch's session-level lock, no transaction): n1 is
    cordoned while the batch waits for the distributor, after its first read. The distributor is asked without the
    pod's lock, so the read under the lock that follows finds n1 cordoned: the batch is decided again against it
    (in arrival order, p-0 on n2 and p-1 on n3), its new asks confirmed in a second round trip, and nothing is
    rejected at the submit (docs/pipeline.md "The pod lock and the distributor"). The submit's own rejection of a
    node changed after the read is checked above, on `submit_plan` itself."""
    await _setup(store_pool)
    store = PgStore(store_pool)
    bus = InMemoryBus()
    serve_placement(bus)
    calls = 0

    async def place_and_cordon(message: Message) -> bytes:
        nonlocal calls
        calls += 1
        if calls == 1:  # the batch's round trip: an operator cordons n1 meanwhile
            await store_pool.execute("UPDATE nodes SET cordoned = true, version = version + 1 WHERE name = 'n1'")
        return place_batch_reply(message)

    bus.serve(DISTRIBUTOR_PLACE_BATCH, place_and_cordon)
    ctx = Context(store, bus, CONFIG, "allocator/a", 5.0, 3600.0, plan_ahead=False)
    answers = await commit_batch(ctx, POD, _items("p", 2))

    assert all(isinstance(answer, Accepted) for answer in answers)
    assert calls == 2  # the first round trip, and the one for the batch decided again under the lock
    rows = await store_pool.fetch("SELECT d.request_id, c.node FROM containers c JOIN deploys d ON d.id = c.deploy_id")
    assert sorted((row["request_id"], row["node"]) for row in rows) == [("p-0", "n2"), ("p-1", "n3")]
    assert await store_pool.fetchval("SELECT used_cpu_map = '{}'::jsonb FROM nodes WHERE name = 'n1'")
    assert await usage_problems(store_pool) == []
