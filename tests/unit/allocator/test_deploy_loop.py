"""The deploy loop on the in-memory store (docs/pipeline.md "The deploy loop"): `submit_plan` re-checks only the nodes
a plan touches, commits the requests whose nodes still fit and hands back the refreshed snapshot; the loop decides
the rejected requests again against it, and gives the batch back after `RETRY_MAX` rounds in a row that commit
nothing (a round that commits something resets the count)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest

from eru.bus import Retryable, new_envelope
from eru.bus.subjects import DISTRIBUTOR_PLACE_BATCH
from eru.domain import Accepted, DeployRequest
from eru.planning import NodeResources, PlanningConfig
from eru.planning.snapshot import ClusterSnapshot
from eru.store.plans import Plan, PlanPart, PlanResult, recheck
from eru.store.protocol import PodWrites, SnapshotNeeds, Usage
from eru.testing.memory_bus import InMemoryBus, Message, place_batch_reply, serve_placement
from eru.testing.memory_store import InMemoryStore
from eru_allocator.deploy import loop
from eru_allocator.deploy.context import Context
from eru_allocator.deploy.decision import PodPlan, plan_one
from eru_allocator.deploy.pipeline import commit_batch
from eru_allocator.deploy.placing import PredictingPlacer
from eru_allocator.deploy.requests import validate

CONFIG = PlanningConfig()
GIB = 1 << 30
NEEDS = SnapshotNeeds(CONFIG, 30.0, workloads=frozenset({"web"}))
WEB = {"name": "web", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 2}}


def _store(nodes: Sequence[str]) -> InMemoryStore:
    store = InMemoryStore()
    store.add_pod("p1")
    for name in nodes:
        store.add_node("p1", NodeResources(name, {"0": 100, "1": 100}, 8 * GIB))
    return store


def _items(tag: str, count: int) -> list[Any]:
    items = []
    for index in range(count):
        req = DeployRequest.model_validate({"pod": "p1", "count": 1, "request_id": f"{tag}-{index}", "workload": WEB})
        items.append((req, validate(req, CONFIG), new_envelope("eru.deploy.request", "test")))
    return items


async def _decided(store: InMemoryStore, snapshot: ClusterSnapshot, items: list[Any]) -> PodPlan:
    ctx = Context(store, InMemoryBus(), CONFIG, "allocator/test", 1.0, 30.0)
    state = PodPlan(None, snapshot)
    state.placer = PredictingPlacer()
    for req, normalized, envelope in items:
        start = state.marks()
        assert isinstance(await plan_one(ctx, state, req, normalized, envelope, req.request_id), Accepted)
        state.close_part(start)
    return state


def _fill(store: InMemoryStore, name: str) -> None:
    """Another writer takes every core of `name` (what a replica's commit does to the node's row)."""
    node = store.nodes[name]
    node.resources = replace(node.resources, used_cpu_map={"0": 100, "1": 100})


async def test_submit_plan_rejects_only_the_touched_node_that_changed_and_commits_the_rest() -> None:
    store = _store(["n1", "n2", "n3", "n4"])
    async with store.pod("p1") as session:
        snapshot = await session.snapshot(NEEDS)
    decided = await _decided(store, snapshot, _items("a", 3))
    assert [row.node for row in decided.writes.containers] == ["n1", "n2", "n3"]
    _fill(store, "n1")  # between the snapshot and the submit

    async with store.pod("p1") as session:
        result = await session.submit_plan(decided.plan("p1", NEEDS))
        assert result.rejected_nodes == {"n1": "cpu"}
        assert result.committed == (1, 2)
        assert result.written is not None
        assert [row.request_id for row in result.written.deploys] == ["a-1", "a-2"]
        assert result.refreshed_snapshot is not None  # read in the session: its own commit counted
        used = {node.name: sum(node.used_cpu_map.values()) for node in result.refreshed_snapshot.nodes}
        assert used == {"n1": 200, "n2": 200, "n3": 200, "n4": 0}
        again = await _decided(store, result.refreshed_snapshot, _items("a", 1))
        assert [row.node for row in again.writes.containers] == ["n4"]
        assert (await session.submit_plan(again.plan("p1", NEEDS))).full_commit

    assert sorted(row.node for row in store.containers.values()) == ["n2", "n3", "n4"]
    assert {name: sum(node.resources.used_cpu_map.values()) for name, node in store.nodes.items()} == {
        "n1": 200,
        "n2": 200,
        "n3": 200,
        "n4": 200,
    }
    assert sorted(deploy.request_id for deploy in store.deploys.values()) == ["a-0", "a-1", "a-2"]


async def test_a_plan_with_every_node_rejected_writes_nothing() -> None:
    store = _store(["n1", "n2"])
    async with store.pod("p1") as session:
        snapshot = await session.snapshot(NEEDS)
    decided = await _decided(store, snapshot, _items("c", 2))
    store.nodes["n1"].cordoned = True
    store.nodes["n2"].state = "down"
    async with store.pod("p1") as session:
        result = await session.submit_plan(decided.plan("p1", NEEDS))
    assert result.rejected_nodes == {"n1": "cordoned", "n2": "down"}
    assert result.committed == ()
    assert result.written is None
    assert store.submits == 0
    assert store.deploys == {}
    assert all(not node.resources.used_cpu_map for node in store.nodes.values())


async def test_the_pipeline_places_elsewhere_a_request_whose_node_filled_while_it_decided() -> None:
    store = _store(["n1", "n2", "n3"])
    bus = InMemoryBus()
    serve_placement(bus)

    calls: list[int] = []

    def place_and_fill(message: Message) -> bytes:  # the batch's distributor round trip: n1 fills meanwhile
        calls.append(len(calls))
        _fill(store, "n1")
        return place_batch_reply(message)

    bus.serve(DISTRIBUTOR_PLACE_BATCH, place_and_fill)
    answers = await commit_batch(Context(store, bus, CONFIG, "allocator/test", 1.0, 30.0), "p1", _items("b", 2))
    assert all(isinstance(answer, Accepted) for answer in answers)
    assert sorted(row.node for row in store.containers.values()) == ["n2", "n3"]
    # the fill is in the pod read after the distributor answered: the batch is decided again against that read
    # (its new asks confirmed in a second round trip) and submitted once, nothing rejected
    assert len(calls) == 2
    assert store.submits == 1
    assert sum(store.nodes["n1"].resources.used_cpu_map.values()) == 200  # never charged beyond its cores


class _Decision:
    def __init__(self, parts: int) -> None:
        self.parts = parts

    def plan(self, pod: str, needs: SnapshotNeeds) -> Plan:
        usage = {"n1": [Usage({"0": 1}, 0, {})]}
        return Plan(pod, PodWrites(usage=usage), tuple(PlanPart(usage={"n1": ()}) for _ in range(self.parts)), needs)


class _Session:
    """A session whose `submit_plan` answers from a script: how many parts each round commits."""

    def __init__(self, commits: Sequence[int | None]) -> None:
        self.commits = list(commits)
        self.rounds = 0

    async def submit_plan(self, plan: Plan) -> PlanResult:
        self.rounds += 1
        count = self.commits.pop(0)
        if count is None:
            return PlanResult(tuple(range(len(plan.parts))), written=plan.writes)
        snapshot = ClusterSnapshot(config=CONFIG, nodes=())
        return PlanResult(tuple(range(count)), {"n1": "cpu"}, snapshot, plan.writes if count else None)


async def _run(session: _Session, parts: int) -> loop.Submitted:
    async def replan(snapshot: ClusterSnapshot, indexes: tuple[int, ...]) -> loop.Decided:
        return loop.Decided(_Decision(len(indexes)), [Accepted(deploy_id=f"again-{i}") for i in indexes], indexes)

    first = loop.Decided(
        _Decision(parts), [Accepted(deploy_id=f"first-{i}") for i in range(parts)], tuple(range(parts))
    )
    keys = [f"k{i}" for i in range(parts)]
    return await loop.submit_until_placed(session, "p1", NEEDS, first, replan, keys, retry_max=3)  # type: ignore[arg-type]


async def test_the_loop_gives_the_batch_back_after_retry_max_rounds_that_commit_nothing() -> None:
    session = _Session([0, 0, 0, None])
    with pytest.raises(Retryable):
        await _run(session, 2)
    assert session.rounds == 3


async def test_a_round_that_commits_something_resets_the_count() -> None:
    # 0, 0 (two failures), 1 part committed (reset), 0, 0 (two failures), then the rest commits: 6 rounds, no give-up
    session = _Session([0, 0, 1, 0, 0, None])
    done = await _run(session, 3)
    assert session.rounds == 6
    assert done.rounds == 6
    assert [answer.deploy_id for answer in done.answers if isinstance(answer, Accepted)] == [
        "again-0",
        "again-1",
        "again-2",
    ]
    assert done.rejected == {"n1": "cpu"}


def test_recheck_names_what_no_longer_fits() -> None:
    node = NodeResources("n1", {"0": 100, "1": 100}, 4 * GIB, used_cpu_map={"0": 60}, used_memory=GIB)
    assert recheck(node, Usage({"0": 40, "1": 100}, 3 * GIB, {})) is None
    assert recheck(node, Usage({"0": 41}, 0, {})) == "cpu"
    assert recheck(node, Usage({}, 3 * GIB + 1, {})) == "memory"
    assert recheck(None, Usage({}, 0, {})) == "gone"
    assert recheck(node, Usage({}, 0, {}), cordoned=True) == "cordoned"
