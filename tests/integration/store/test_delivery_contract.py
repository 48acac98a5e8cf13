"""The delivery capability's contract (`eru.store.delivery.DeliveryStore`, docs/store.md "The contract suite"), run
against the in-memory store (`eru.testing.memory_store`) and against `PgDelivery` on a real PostgreSQL: what the
relay's, the publisher's and the settled requests' unit tests learn on the fake holds on the database.

The cases speak only the capability's verbs (and the deploy path's `AllocatorStore` to store a deploy): a claim
oldest first with its typed rows, published when its block ends and given back when it raises; claims at the same
time taking disjoint rows (the parallel relay of every replica); held rows skipped until released or marked by their
process; the wake-up of a commit and of a release; the tenant of each claimed deploy event; an operation's first
answer kept; a dead letter replaced, forgotten, and never over an accepted request; the prune round; a retention
pass with nothing finished. Rows are queued and made old through the `Backend` (what the units of work and the clock
do, outside the capability).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import asyncpg
import pytest
import pytest_asyncio

from eru.store import add_to_outbox, seen_before, transaction
from eru.store.delivery import DeliveryStore, Pruned, SettledRequest
from eru.store.pool import create_pool
from eru.store.protocol import AllocatorStore, DeployRow, PodWrites
from eru.store.settled_retention import SettleWindows
from eru.store.transaction import OutboxMessage
from eru.testing.memory_store import InMemoryStore
from eru_allocator.store.delivery_store import PgDelivery
from eru_allocator.store.postgres import PgStore

POD = "cp"
WINDOWS = SettleWindows(7200.0, 86400.0)
HEADERS = {"ce-type": "eru.test", "content-type": "application/msgpack"}

HELD_SQL = """
INSERT INTO outbox (event_id, subject, headers, body, held_until)
VALUES ($1, $2, $3::jsonb, $4, clock_timestamp() + make_interval(secs => $5::float8))
"""


@dataclass
class Backend:
    """A store under contract and how a test arranges it."""

    name: str
    delivery: DeliveryStore
    store: AllocatorStore
    queue: Callable[[str, str, float | None], Awaitable[None]]
    """(event id, subject, held seconds or None): one committed row, body `<event id>` and `HEADERS`."""
    add_pod: Callable[[str], Awaitable[None]]
    mark_inbox: Callable[[str, str], Awaitable[None]]
    """(consumer, message id): an inbox mark made now."""
    age: Callable[[float], Awaitable[None]]
    """Published rows and inbox marks move `seconds` into the past."""
    windows: Callable[[], Awaitable[SettleWindows | None]]


def _memory() -> Backend:
    store = InMemoryStore()

    async def queue(event_id: str, subject: str, held: float | None) -> None:
        store.queue_outbox(event_id, subject, event_id.encode(), HEADERS, held_seconds=held)

    async def add_pod(name: str) -> None:
        store.add_pod(name)

    async def mark_inbox(consumer: str, message_id: str) -> None:
        store.mark_inbox(consumer, message_id)

    async def age(seconds: float) -> None:
        store.now += seconds

    async def windows() -> SettleWindows | None:
        return store.delivery_state.windows

    return Backend("memory", store, store, queue, add_pod, mark_inbox, age, windows)


def _postgres(pool: asyncpg.Pool) -> Backend:
    async def queue(event_id: str, subject: str, held: float | None) -> None:
        async with transaction(pool) as conn:
            if held is None:
                await add_to_outbox(conn, event_id=event_id, subject=subject, body=event_id.encode(), headers=HEADERS)
            else:
                await conn.execute(HELD_SQL, event_id, subject, json.dumps(HEADERS), event_id.encode(), held)

    async def add_pod(name: str) -> None:
        await pool.execute("INSERT INTO pods (name, policy) VALUES ($1, '{}'::jsonb)", name)

    async def mark_inbox(consumer: str, message_id: str) -> None:
        async with transaction(pool) as conn:
            await seen_before(conn, consumer, message_id)

    async def age(seconds: float) -> None:
        await pool.execute("UPDATE outbox SET published_at = published_at - make_interval(secs => $1)", seconds)
        await pool.execute("UPDATE inbox SET processed_at = processed_at - make_interval(secs => $1)", seconds)

    async def windows() -> SettleWindows | None:
        row = await pool.fetchrow("SELECT accepted_seconds, dead_lettered_seconds FROM settle_windows")
        return None if row is None else SettleWindows(float(row[0]), float(row[1]))

    return Backend("postgres", PgDelivery(pool), PgStore(pool), queue, add_pod, mark_inbox, age, windows)


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


async def _claim_all(backend: Backend) -> list[str]:
    """The event ids of every row claimable now, published by the claim."""
    async with backend.delivery.claim(100, tenants=False) as claimed:
        return [message.event_id for message in claimed.messages]


async def _deploy(backend: Backend, deploy_id: str, request_id: str, tenant: str) -> None:
    row = DeployRow(deploy_id, request_id, POD, tenant, "planned", '{"count": 1}', "{}")
    async with backend.store.pod(POD) as session:
        await session.submit(PodWrites(deploys=[row]))


async def test_a_claim_takes_rows_oldest_first_and_publishes_them_when_its_block_ends(backend: Backend) -> None:
    for event_id in ("e1", "e2", "e3"):
        await backend.queue(event_id, f"eru.node.n1.cmd.{event_id}", None)
    async with backend.delivery.claim(2, tenants=False) as claimed:
        messages = list(claimed.messages)
        assert claimed.tenants == {}
    assert [m.event_id for m in messages] == ["e1", "e2"]
    assert all(isinstance(m, OutboxMessage) for m in messages)
    first = messages[0]
    assert (first.subject, first.body, dict(first.headers)) == ("eru.node.n1.cmd.e1", b"e1", HEADERS)
    assert messages[0].id < messages[1].id
    assert await _claim_all(backend) == ["e3"]
    assert await _claim_all(backend) == []


async def test_a_claim_that_raises_gives_its_rows_back(backend: Backend) -> None:
    await backend.queue("e1", "eru.node.n1.cmd.a", None)
    await backend.queue("e2", "eru.node.n1.cmd.b", None)
    taken: list[str] = []

    async def publish_fails() -> None:
        async with backend.delivery.claim(10, tenants=False) as claimed:
            taken.extend(message.event_id for message in claimed.messages)
            raise RuntimeError("the publish failed")

    with pytest.raises(RuntimeError):
        await publish_fails()
    assert taken == ["e1", "e2"]
    assert await _claim_all(backend) == ["e1", "e2"]


async def test_claims_at_the_same_time_take_disjoint_rows(backend: Backend) -> None:
    for event_id in ("e1", "e2", "e3"):
        await backend.queue(event_id, "eru.node.n1.cmd.x", None)
    async with backend.delivery.claim(2, tenants=False) as first:
        async with backend.delivery.claim(10, tenants=False) as second:
            assert [m.event_id for m in second.messages] == ["e3"]  # e1, e2 are held by the first claim
        assert [m.event_id for m in first.messages] == ["e1", "e2"]
    assert await _claim_all(backend) == []


async def test_a_held_row_waits_until_released_and_a_marked_one_is_never_claimed(backend: Backend) -> None:
    await backend.queue("held-1", "eru.node.n1.cmd.a", 300.0)
    await backend.queue("held-2", "eru.node.n1.cmd.b", 300.0)
    await backend.queue("plain", "eru.node.n1.cmd.c", None)
    assert await _claim_all(backend) == ["plain"]
    await backend.delivery.mark_published(["held-1"])  # its process published it
    await backend.delivery.release_held(["held-1", "held-2"])  # held-2's publish failed
    assert await _claim_all(backend) == ["held-2"]
    await backend.delivery.mark_published(["plain"])  # a relay published it already: left as it is
    assert await _claim_all(backend) == []


async def test_a_commit_and_a_release_wake_the_relays(backend: Backend) -> None:
    async with backend.delivery.outbox_wakes() as wake:
        assert not wake.is_set()
        await backend.queue("e1", "eru.node.n1.cmd.a", None)
        await asyncio.wait_for(wake.wait(), timeout=10)
        await backend.queue("held", "eru.node.n1.cmd.b", 300.0)
        wake.clear()
        await backend.delivery.release_held(["held"])
        await asyncio.wait_for(wake.wait(), timeout=10)


async def test_a_claim_names_the_tenant_of_each_deploy_event_when_asked(backend: Backend) -> None:
    await backend.add_pod(POD)
    await _deploy(backend, "d1", "r1", "acme/web")
    await _deploy(backend, "d2", "r2", "beta")
    await backend.queue("e1", "eru.deploy.d1.planned", None)
    await backend.queue("e2", "eru.deploy.d2.completed", None)
    await backend.queue("e3", "eru.deploy.unknown.failed", None)
    await backend.queue("e4", "eru.node.n1.cmd.start", None)
    async with backend.delivery.claim(2, tenants=True) as claimed:
        assert dict(claimed.tenants) == {"d1": "acme", "d2": "beta"}  # a group's events: its parent's
    async with backend.delivery.claim(10, tenants=False) as claimed:
        assert [m.event_id for m in claimed.messages] == ["e3", "e4"]
        assert claimed.tenants == {}


async def test_an_operation_keeps_its_first_answer(backend: Backend) -> None:
    assert await backend.delivery.operation_answer("remove:m1") is None
    assert await backend.delivery.settled_request("remove:m1") is None
    await backend.delivery.record_operation("remove:m1", "remove", '{"message": "first"}')
    await backend.delivery.record_operation("remove:m1", "remove", '{"message": "second"}')
    assert await backend.delivery.operation_answer("remove:m1") == '{"message": "first"}'
    assert await backend.delivery.settled_request("remove:m1") == SettledRequest(
        "remove:m1", "remove", "accepted", '{"message": "first"}', None
    )
    assert await backend.delivery.operation_answer("remove:m2") is None


async def test_a_dead_letter_is_replaced_forgotten_and_never_over_an_accepted_request(backend: Backend) -> None:
    delivery = backend.delivery
    await delivery.record_dead_letter("r1", "store_unavailable", "m1")
    assert await delivery.settled_request("r1") == SettledRequest(
        "r1", "deploy", "dead_lettered", "store_unavailable", "m1"
    )
    await delivery.record_dead_letter("r1", "max deliveries", "m2")
    assert await delivery.settled_request("r1") == SettledRequest(
        "r1", "deploy", "dead_lettered", "max deliveries", "m2"
    )
    await delivery.forget_dead_letter("r1")
    assert await delivery.settled_request("r1") is None
    await backend.add_pod(POD)
    await _deploy(backend, "d1", "r2", "default")
    await delivery.record_dead_letter("r2", "late letter", "m3")  # deployed: the accepted answer wins
    accepted = await delivery.settled_request("r2")
    assert accepted is not None
    assert (accepted.kind, accepted.outcome) == ("deploy", "accepted")
    await delivery.forget_dead_letter("r2")  # a redrive: the accepted row stays
    assert await delivery.settled_request("r2") == accepted


async def test_the_prune_round_keeps_the_windows_and_forgets_old_rows_and_marks(backend: Backend) -> None:
    await backend.queue("old-1", "eru.node.n1.cmd.a", None)
    await backend.queue("old-2", "eru.node.n1.cmd.b", None)
    assert await _claim_all(backend) == ["old-1", "old-2"]
    await backend.mark_inbox("allocator-events", "m1")
    await backend.age(7200.0)
    await backend.queue("pending", "eru.node.n1.cmd.c", None)
    assert await backend.delivery.prune(WINDOWS, 3600.0, 86400.0) == Pruned(2, 0)
    assert await backend.windows() == WINDOWS
    await backend.age(86400.0)
    assert await backend.delivery.prune(WINDOWS, 3600.0, 86400.0) == Pruned(0, 1)
    assert await _claim_all(backend) == ["pending"]  # never published: never pruned


async def test_a_retention_pass_with_nothing_finished_runs_and_moves_and_drops_nothing(backend: Backend) -> None:
    done = await backend.delivery.retention_pass(7 * 86400.0)
    assert done.ran
    assert sum(done.moved.values()) == 0
    assert (done.dropped, done.busy) == ([], [])
