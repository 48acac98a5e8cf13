"""The nodes capability's contract (`eru.store.nodes.NodeStore`, docs/store.md "The contract suite"), run against the
in-memory store (`eru.testing.memory_store`) and against `PgNodes` on a real PostgreSQL, like httpx's transports:
what the registry's unit tests learn on the fake holds on the database.

The cases speak only the capability's verbs (and the deploy path's `AllocatorStore` to charge usage and take
snapshots): registrations (a new node joins its pod, a known one stays where an operator moved it, usage untouched),
heartbeats of known and unknown nodes, conditions (the newest wins, a late older one and an unknown node are ignored),
cordon, and an operator's change of a node (added, updated, refused by its callbacks, moved only without live
containers), a pod created once, node commands queued, and node agents' inventories (the newest kept per node) with
the cores and the ledger they are reconciled with. A node is read back through `change_node` with a change
that raises (so nothing is written); the outbox is read beside the capability.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace

import asyncpg
import pytest
import pytest_asyncio

from eru.bus import new_envelope
from eru.bus.subjects import node_command
from eru.domain import NodeCommand
from eru.domain.colocation import NodeCondition
from eru.domain.inventory import InventoryEntry, NodeInventory
from eru.planning import PlanningConfig
from eru.store.container_events import ContainerEventStore
from eru.store.nodes import NodeCapacity, NodeRecord, NodeStore
from eru.store.pool import create_pool
from eru.store.protocol import (
    AllocatorStore,
    ContainerRow,
    DeployRow,
    OutboxMessage,
    PodWrites,
    SnapshotNeeds,
    Usage,
)
from eru.testing.memory_store import InMemoryStore
from eru_allocator.store.container_store import PgContainerEvents
from eru_allocator.store.node_store import PgNodes
from eru_allocator.store.postgres import PgStore

POD = "cp"
NEEDS = SnapshotNeeds(PlanningConfig(), 30.0)
N1 = NodeCapacity("n1", POD, {"0": 100, "1": 100}, 4 << 30, {"0": "0", "1": "0"}, {"0": 4 << 30}, 100, {"zone": "a"})


@dataclass
class Backend:
    """A store under contract and how a test arranges it."""

    name: str
    store: AllocatorStore
    nodes: NodeStore
    events: ContainerEventStore
    age: Callable[[float], Awaitable[None]]
    """Every heartbeat moves `seconds` into the past (memory: the clock moves on)."""


def _memory() -> Backend:
    store = InMemoryStore()

    async def age(seconds: float) -> None:
        store.now += seconds

    return Backend("memory", store, store, store, age)


def _postgres(pool: asyncpg.Pool) -> Backend:
    async def age(seconds: float) -> None:
        await pool.execute("UPDATE node_status SET heartbeat_at = heartbeat_at - make_interval(secs => $1)", seconds)

    return Backend("postgres", PgStore(pool), PgNodes(pool), PgContainerEvents(pool), age)


@pytest_asyncio.fixture
async def backend(database: str | None) -> AsyncIterator[Backend]:
    """The in-memory store, then PostgreSQL on the test's database."""
    if database is None:
        yield _memory()
        return
    pool = await create_pool(database, min_size=1, max_size=4)
    try:
        yield _postgres(pool)
    finally:
        await pool.close()


class _Read(Exception):
    """Raised by a change to read a node without writing it."""


async def _read(backend: Backend, name: str) -> NodeRecord | None:
    seen: list[NodeRecord | None] = []

    def look(current: NodeRecord | None) -> NodeRecord:
        seen.append(current)
        raise _Read

    with pytest.raises(_Read):
        await backend.nodes.change_node(name, look, lambda _pod, _live: None)
    return seen[0]


def _never_moved(_pod: str, _live: int) -> None:
    raise AssertionError("the node did not move")


def _may_move(_pod: str, _live: int) -> None:
    return None


async def _set(
    backend: Backend, capacity: NodeCapacity, check: Callable[[str, int], None] = _never_moved, **labels: str
) -> NodeRecord | None:
    def change(current: NodeRecord | None) -> NodeRecord:
        return NodeRecord(capacity, labels)

    return await backend.nodes.change_node(capacity.name, change, check)


async def _charge(backend: Backend, node: str) -> None:
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(usage={node: [Usage({"0": 50}, 64 << 20, {})]}))


def _condition(node: str, time: float, **fields: object) -> NodeCondition:
    return NodeCondition.model_validate({"node": node, "time": time, **fields})


async def test_a_registered_node_joins_its_pod_and_is_read_back(backend: Backend) -> None:
    await backend.nodes.register([N1, replace(N1, name="n2", pod="other", labels={})])
    stored = await _read(backend, "n1")
    assert stored == NodeRecord(N1, {}, {}, 0)
    other = await _read(backend, "n2")
    assert other is not None
    assert other.capacity.pod == "other"
    assert await _read(backend, "ghost") is None
    async with backend.store.pod(POD) as session:
        snapshot = await session.snapshot(NEEDS)
    assert [node.name for node in snapshot.nodes] == ["n1"]


async def test_a_known_node_registering_again_keeps_its_pod_and_its_usage(backend: Backend) -> None:
    await backend.nodes.register([N1])
    await _charge(backend, "n1")
    moved = replace(N1, pod="moved")
    await _set(backend, moved, _may_move, team="web")
    await backend.nodes.register([replace(N1, memory=8 << 30, labels={"zone": "b"})])
    stored = await _read(backend, "n1")
    assert stored is not None
    assert stored.capacity == replace(N1, pod="moved", memory=8 << 30, labels={"zone": "b"})
    assert stored.operator_labels == {"team": "web"}
    assert (stored.used_cpu_map.get("0"), stored.used_memory) == (50, 64 << 20)


async def test_heartbeats_answer_the_known_nodes_and_a_silent_node_heard_again_is_not_silent(
    backend: Backend,
) -> None:
    await backend.nodes.register([N1, replace(N1, name="n2")])
    deploy = DeployRow("d1", "k1", POD, "acme", "completed", "{}", "{}")
    running = ContainerRow(
        "c1", "d1", "n1", POD, "web", "busybox", "acme", "prod", 0, '{"cpu_map": {}}', "{}", "running", "{}", None
    )
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[deploy], containers=[running]))
    await backend.age(60)
    assert [c.id for c in await backend.events.on_silent_nodes(30)] == ["c1"]
    assert await backend.nodes.heartbeats(["n1", "ghost"]) == {"n1"}
    assert await backend.events.on_silent_nodes(30) == []


async def test_the_newest_condition_wins_and_late_or_unknown_ones_are_ignored(backend: Backend) -> None:
    await backend.nodes.register([N1, replace(N1, name="n2")])
    first = await backend.nodes.write_conditions(
        [_condition("n1", 5.0, forbid_schedule_cpu=True), _condition("n1", 7.0), _condition("ghost", 1.0)]
    )
    assert [(c.name, c.pod, dict(c.before), c.after["time"]) for c in first] == [("n1", POD, {}, 7.0)]
    assert await backend.nodes.write_conditions([_condition("n1", 6.0, state="suppressed")]) == []
    [later] = await backend.nodes.write_conditions([_condition("n1", 9.0, state="suppressed")])
    assert (later.before["time"], later.before["state"], later.after["state"]) == (7.0, "normal", "suppressed")
    assert json.loads(json.dumps(later.after))["node"] == "n1"


async def test_a_cordoned_node_is_left_out_of_the_snapshot_and_an_unknown_one_is_answered_false(
    backend: Backend,
) -> None:
    await backend.nodes.register([N1, replace(N1, name="n2")])
    assert await backend.nodes.set_cordoned("n2", True) is True
    assert await backend.nodes.set_cordoned("ghost", True) is False
    async with backend.store.pod(POD) as session:
        snapshot = await session.snapshot(NEEDS)
    assert [node.name for node in snapshot.nodes] == ["n1"]
    assert await backend.nodes.set_cordoned("n2", False) is True
    async with backend.store.pod(POD) as session:
        snapshot = await session.snapshot(NEEDS)
    assert [node.name for node in snapshot.nodes] == ["n1", "n2"]


async def test_an_operators_change_adds_then_updates_and_a_change_that_raises_writes_nothing(
    backend: Backend,
) -> None:
    assert await _set(backend, N1, team="web") is None, "added"
    previous = await _set(backend, replace(N1, memory=2 << 30), team="db")
    assert previous == NodeRecord(N1, {"team": "web"}, {}, 0)
    with pytest.raises(ValueError, match="refused"):
        await backend.nodes.change_node("n1", _refuse, _never_moved)
    stored = await _read(backend, "n1")
    assert stored == NodeRecord(replace(N1, memory=2 << 30), {"team": "db"}, {}, 0)


def _refuse(_current: NodeRecord | None) -> NodeRecord:
    raise ValueError("refused")


async def test_a_node_moves_pods_only_when_its_move_check_allows_it(backend: Backend) -> None:
    await backend.nodes.register([N1])
    deploy = DeployRow("d1", "k1", POD, "acme", "completed", "{}", "{}")
    rows = [
        ContainerRow(
            cid, "d1", "n1", POD, "web", "busybox", "acme", "prod", 0, '{"cpu_map": {}}', "{}", state, "{}", None
        )
        for cid, state in (("c1", "running"), ("c2", "removed"), ("c3", "planned"))
    ]
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[deploy], containers=rows))
    asked: list[tuple[str, int]] = []

    def refuse_live(pod: str, live: int) -> None:
        asked.append((pod, live))
        if live:
            raise ValueError(f"{live} live")

    with pytest.raises(ValueError, match="2 live"):
        await backend.nodes.change_node("n1", lambda current: NodeRecord(replace(N1, pod="other")), refuse_live)
    assert asked == [(POD, 2)]
    stored = await _read(backend, "n1")
    assert stored is not None
    assert stored.capacity.pod == POD


async def test_a_pod_is_created_once(backend: Backend) -> None:
    assert await backend.nodes.create_pod("edge") is True
    assert await backend.nodes.create_pod("edge") is False
    await backend.nodes.register([N1])  # the agent's pod is created with its first node
    assert await backend.nodes.create_pod(POD) is False


async def _queued(backend: Backend) -> list[tuple[str, str]]:
    """(subject, message id) of every outbox row, in the order queued."""
    if isinstance(backend.store, InMemoryStore):
        return [(message.subject, message.envelope.id) for message in backend.store.outbox]
    assert isinstance(backend.store, PgStore)
    rows = await backend.store.pool.fetch("SELECT subject, event_id FROM outbox ORDER BY id")
    return [(row["subject"], row["event_id"]) for row in rows]


def _command(node: str, command_id: str) -> OutboxMessage:
    command = NodeCommand(command_id=command_id, node=node, kind="remove", container_id="c1", reason="test")
    envelope = new_envelope("eru.node.cmd.remove", "test", message_id=command_id)
    return OutboxMessage(node_command(node, "remove"), command, envelope)


async def test_node_commands_are_queued_in_order_once_each(backend: Backend) -> None:
    await backend.nodes.queue_commands([_command("n2", "k2"), _command("n1", "k1")])
    await backend.nodes.queue_commands([_command("n1", "k1"), _command("n1", "k3")])  # k1 again: dropped
    await backend.nodes.queue_commands([])
    assert await _queued(backend) == [
        (node_command("n2", "remove"), "k2"),
        (node_command("n1", "remove"), "k1"),
        (node_command("n1", "remove"), "k3"),
    ]


def _inventory(node: str, taken_at: float, *containers: str) -> NodeInventory:
    entries = [
        InventoryEntry.model_validate(
            {"container_id": cid, "managed": True, "node": node, "state": "running", "cpuset": "0", "memory": 1}
        )
        for cid in containers
    ]
    return NodeInventory(node=node, agent="run-1", taken_at=taken_at, containers=entries)


async def test_the_newest_inventory_of_each_node_is_kept_and_listed(backend: Backend) -> None:
    await backend.nodes.register([N1, replace(N1, name="n2", pod="other")])
    assert await backend.nodes.keep_inventories([_inventory("n1", 10.0, "c1"), _inventory("n2", 5.0)]) == ["n1", "n2"]
    assert await backend.nodes.keep_inventories([_inventory("n1", 8.0), _inventory("n2", 5.0)]) == []  # not newer
    assert await backend.nodes.keep_inventories([_inventory("n1", 12.0, "c1", "c2")]) == ["n1"]
    assert await backend.nodes.keep_inventories([_inventory("ghost", 1.0)]) == ["ghost"]  # kept, listed once known
    kept = await backend.nodes.kept_inventories(None, None)
    assert [(k.node, k.inventory.taken_at, len(k.inventory.containers)) for k in kept] == [
        ("n1", 12.0, 2),
        ("n2", 5.0, 0),
    ]
    assert all(0.0 <= k.age_seconds < 30.0 for k in kept)
    assert [k.node for k in await backend.nodes.kept_inventories("n2", None)] == ["n2"]
    assert [k.node for k in await backend.nodes.kept_inventories(None, POD)] == ["n1"]
    assert await backend.nodes.kept_inventories("n1", "other") == []


async def test_the_ledger_a_node_is_reconciled_with(backend: Backend) -> None:
    await backend.nodes.register([N1, replace(N1, name="n2")])
    deploy = DeployRow("d1", "k1", POD, "acme", "completed", "{}", "{}")
    allocation = '{"cpu_map": {"0": 50}}'

    def row(cid: str, node: str, state: str, replaces: str | None = None) -> ContainerRow:
        return ContainerRow(
            cid, "d1", node, POD, "web", "busybox", "acme", "batch", 0, allocation, "{}", state, "{}", replaces
        )

    rows = [row("c1", "n1", "running"), row("c2", "n1", "removed"), row("c3", "n1", "lost"), row("c4", "n2", "running")]
    rows.append(row("c5", "n1", "planned", replaces="c1"))
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[deploy], containers=rows))
    assert await backend.nodes.node_cores(["n1", "ghost"]) == {"n1": ["0", "1"]}
    ledgers = await backend.nodes.ledgers({"n1": {"c2", "c4"}, "n2": set(), "ghost": set()})
    assert sorted(ledgers) == ["ghost", "n1", "n2"]
    found = {r.container_id: r for r in ledgers["n1"]}
    assert sorted(found) == ["c1", "c2", "c5"]  # c2 gone but listed; c3 gone, unlisted; c4 is n2's
    assert (found["c1"].state, found["c1"].pending_replacement, found["c5"].pending_replacement) == (
        "running",
        True,
        False,
    )
    assert (dict(found["c1"].allocation), found["c1"].priority_class) == ({"cpu_map": {"0": 50}}, "batch")
    assert [r.container_id for r in ledgers["n2"]] == ["c4"]
    assert ledgers["ghost"] == []
