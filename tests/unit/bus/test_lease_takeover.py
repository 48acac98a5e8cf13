"""Partition leases taken over from a dead peer at once (docs/replicas.md "A replica dies"), over an in-memory KV
with NATS KV's semantics (revisions, create-if-absent, update/delete at a revision; entries never expire here, so
any takeover seen is the probe's, not the TTL's): the counting of "nobody there" answers, the eviction of a dead
peer at the revisions read, a live or merely slow peer left alone, a wrongly evicted peer letting go at its next
renewal, renewals that keep an expired or unacknowledged lease, and every KV call bounded."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError, NoKeysError

from eru.bus.leases import PartitionLeases, count_misses, partition_of


@dataclass
class Entry:
    key: str
    value: bytes
    revision: int


@dataclass
class FakeKV:
    """NATS KV's rules for the calls PartitionLeases makes (and the stream info of its bucket, standing in for the
    JetStream context); `hang` makes every call wait for ever."""

    entries: dict[str, Entry] = field(default_factory=dict)
    markers: set[str] = field(default_factory=set)  # deleted keys: their delete marker is still a message
    revision: int = 0
    hang: bool = False
    lose_answers: int = 0  # the next N updates are stored but their answer is lost (a server died meanwhile)
    expiring: set[str] = field(default_factory=set)  # held keys that expire inside nats-py's create (below)

    async def _gate(self) -> None:
        if self.hang:
            await asyncio.Event().wait()

    def _store(self, key: str, value: bytes) -> int:
        self.revision += 1
        self.entries[key] = Entry(key, value, self.revision)
        self.markers.discard(key)
        return self.revision

    async def put(self, key: str, value: bytes) -> int:
        await self._gate()
        return self._store(key, value)

    async def create(self, key: str, value: bytes) -> int:
        await self._gate()
        if key in self.expiring and key in self.entries:
            # nats-py's create: the write is refused (held), then its read to see whether the holder deleted it
            # finds nothing, the lease having expired in between: KeyNotFoundError out of `create`
            del self.entries[key]
            raise KeyNotFoundError()
        if key in self.entries:
            raise KeyWrongLastSequenceError()
        return self._store(key, value)

    async def update(self, key: str, value: bytes, last: int) -> int:
        await self._gate()
        entry = self.entries.get(key)
        if entry is None or entry.revision != last:
            raise KeyWrongLastSequenceError()
        revision = self._store(key, value)
        if self.lose_answers:
            self.lose_answers -= 1
            raise TimeoutError("stored, but the answer was lost")
        return revision

    async def get(self, key: str) -> Entry:
        await self._gate()
        if key not in self.entries:
            raise KeyNotFoundError()
        return self.entries[key]

    async def delete(self, key: str, last: int | None = None) -> bool:
        await self._gate()
        entry = self.entries.get(key)
        if last is not None and (entry is None or entry.revision != last):
            raise KeyWrongLastSequenceError()
        self.entries.pop(key, None)
        self.revision += 1
        self.markers.add(key)
        return True

    async def keys(self) -> list[str]:
        await self._gate()
        if not self.entries:
            raise NoKeysError()
        return sorted(self.entries)

    async def stream_info(self, name: str, subjects_filter: str) -> SimpleNamespace:
        """The subjects holding a message (deleted keys' markers too), as the server's subject index counts them."""
        await self._gate()
        assert name == "KV_leases"
        assert subjects_filter.endswith(">")
        prefix = subjects_filter[:-1]
        subjects = {f"$KV.leases.{key}": 1 for key in [*self.entries, *self.markers]}
        matching = {subject: count for subject, count in subjects.items() if subject.startswith(prefix)}
        return SimpleNamespace(state=SimpleNamespace(subjects=matching))

    def owner(self, partition: int) -> str | None:
        entry = self.entries.get(f"p.{partition}")
        return entry.value.decode() if entry else None


class Probes:
    """What each peer answers to a probe: True (there), False (nobody listens), None (no answer in time)."""

    def __init__(self) -> None:
        self.answers: dict[str, bool | None] = {}
        self.asked: list[str] = []

    async def __call__(self, replica: str) -> bool | None:
        self.asked.append(replica)
        return self.answers.get(replica, True)


def replica(kv: FakeKV, name: str, probes: Probes | None = None, partitions: int = 8) -> PartitionLeases:
    js = kv  # the fake answers the bucket's stream info too
    leases = PartitionLeases(js, "leases", name, partitions, ttl_seconds=30.0, probe=probes, op_timeout=0.2)  # type: ignore[arg-type]
    leases._kv = kv  # type: ignore[assignment]  # the fake bucket stands in for the opened one
    return leases


async def two_replicas(kv: FakeKV, probes: Probes) -> tuple[PartitionLeases, PartitionLeases]:
    a, b = replica(kv, "a-1", probes), replica(kv, "a-2", probes)
    await a.tick()  # alone: takes all 8
    await b.tick()  # sees two: takes none yet (all held)
    await a.tick()  # gives back its surplus
    await b.tick()  # takes it
    assert sorted(a.owned) == [0, 1, 2, 3]
    assert sorted(b.owned) == [4, 5, 6, 7]
    await a.tick()  # each has read the other's heartbeat: the peers to probe
    await b.tick()
    return a, b


def test_count_misses_needs_consecutive_nobody_answers() -> None:
    misses, dead = count_misses({}, {"p": False, "q": None, "r": True}, confirm=2)
    assert (misses, dead) == ({"p": 1, "q": 0, "r": 0}, set())
    misses, dead = count_misses(misses, {"p": False, "q": False, "r": False}, confirm=2)
    assert (misses, dead) == ({"p": 2, "q": 1, "r": 1}, {"p"})
    # an unknown answer keeps the count, an answer resets it, a peer no longer probed is forgotten
    assert count_misses({"p": 1, "q": 1}, {"p": None, "q": True}, confirm=2) == ({"p": 1, "q": 0}, set())
    assert count_misses({"gone": 1}, {}, confirm=2) == ({}, set())


async def test_a_dead_peers_leases_are_taken_at_once_without_waiting_for_the_ttl() -> None:
    kv, probes = FakeKV(), Probes()
    a, _b = await two_replicas(kv, probes)
    assert a.peers == {"a-2": "a-2"}
    probes.answers["a-2"] = False  # its process died: NATS answers "no responders" on its health subject
    assert await a.find_dead() == set()  # one answer is not enough (a peer may be reconnecting)
    assert await a.find_dead() == {"a-2"}
    assert "replicas.a-2" not in kv.entries
    assert all(kv.owner(p) in (None, "a-1") for p in range(8))  # its leases were deleted, ours kept
    gained, lost = await a.tick()
    assert gained == {4, 5, 6, 7}
    assert lost == set()
    assert sorted(a.owned) == list(range(8))
    assert all(kv.owner(p) == "a-1" for p in range(8))


async def test_a_peer_that_answers_or_is_only_slow_is_never_evicted() -> None:
    kv, probes = FakeKV(), Probes()
    a, _b = await two_replicas(kv, probes)
    for answer in (None, None, None, True, None, None):
        probes.answers["a-2"] = answer
        assert await a.find_dead() == set()
    assert sorted(p for p in range(8) if kv.owner(p) == "a-2") == [4, 5, 6, 7]
    probes.answers["a-2"] = False  # then nobody, once, between answers: not dead either
    await a.find_dead()
    probes.answers["a-2"] = True
    await a.find_dead()
    probes.answers["a-2"] = False
    assert await a.find_dead() == set()


async def test_a_wrongly_evicted_peer_lets_go_at_its_next_renewal_and_no_partition_has_two_owners() -> None:
    # a-2 is alive but its health subscription was away for two probes (it was reconnecting): a-1 evicts it
    kv, probes = FakeKV(), Probes()
    a, b = await two_replicas(kv, probes)
    probes.answers["a-2"] = False
    await a.find_dead()
    assert await a.find_dead() == {"a-2"}
    await a.tick()
    assert sorted(a.owned) == list(range(8))
    probes.answers["a-2"] = True
    gained, lost = await b.tick()  # its renewals fail: a-1 holds those leases at other revisions now
    assert lost == {4, 5, 6, 7}
    assert gained == set()
    assert b.owned == {}
    assert set(a.owned).isdisjoint(b.owned)
    # it is back (its heartbeat again): the fair share moves half back, one partition never held by both
    for _ in range(4):
        await a.tick()
        await b.tick()
        assert set(a.owned).isdisjoint(b.owned)
        assert {p: kv.owner(p) for p in a.owned} == dict.fromkeys(a.owned, "a-1")
        assert {p: kv.owner(p) for p in b.owned} == dict.fromkeys(b.owned, "a-2")
    assert len(a.owned) == len(b.owned) == 4


async def test_an_expired_lease_nobody_took_is_renewed_in_place() -> None:
    kv = FakeKV()
    a = replica(kv, "a-1")
    await a.tick()
    del kv.entries["p.3"]  # expired while the bucket elected a leader for longer than the TTL
    gained, lost = await a.tick()
    assert (gained, lost) == (set(), set())  # kept: no consumer stopped and started again
    assert kv.owner(3) == "a-1"
    assert kv.entries["p.3"].revision == a.owned[3]


async def test_a_lease_taken_back_in_place_stays_owned_meanwhile() -> None:
    """The work of its keys goes on while the lease is taken back: a replica whose renewal came after the TTL (its
    loop held by a burst, its machine loaded) skipped the samples of its own nodes for that moment."""
    kv = FakeKV()
    a = replica(kv, "a-1")
    await a.tick()
    del kv.entries["p.3"]  # expired: the renewal came too late
    inside, release = asyncio.Event(), asyncio.Event()
    plain_create = kv.create

    async def slow_create(key: str, value: bytes) -> int:
        inside.set()
        await release.wait()
        return await plain_create(key, value)

    kv.create = slow_create  # type: ignore[method-assign]
    tick = asyncio.create_task(a.tick())
    await asyncio.wait_for(inside.wait(), 5)
    node = next(f"n{i}" for i in itertools.count() if partition_of(f"n{i}", 8) == 3)
    assert a.owns(node)
    release.set()
    assert await tick == (set(), set())
    assert a.owns(node)
    assert kv.entries["p.3"].revision == a.owned[3]


async def test_a_renewal_stored_with_its_answer_lost_is_kept() -> None:
    kv = FakeKV()
    a = replica(kv, "a-1")
    await a.tick()
    kv.lose_answers = 1
    with pytest.raises(TimeoutError):
        await a.tick()  # the first renewal was stored; our revision of it is stale now
    gained, lost = await a.tick()
    assert (gained, lost) == (set(), set())
    assert all(kv.entries[f"p.{p}"].revision == a.owned[p] for p in range(8))


async def test_another_replicas_lease_is_lost_not_kept() -> None:
    kv = FakeKV()
    a = replica(kv, "a-1")
    await a.tick()
    del kv.entries["p.2"]
    await kv.create("p.2", b"a-9")  # taken by another replica after it expired
    _gained, lost = await a.tick()
    assert 2 in lost
    assert 2 not in a.owned
    assert kv.owner(2) == "a-9"


async def test_every_kv_call_is_bounded_so_a_tick_during_an_election_fails_fast() -> None:
    kv = FakeKV()
    a = replica(kv, "a-1")
    await a.tick()
    kv.hang = True  # the bucket's stream has no leader: nobody answers
    started = asyncio.get_running_loop().time()
    with pytest.raises(TimeoutError):
        await a.tick()
    assert asyncio.get_running_loop().time() - started < 1.0  # op_timeout 0.2 s, not the JetStream 5 s
    assert sorted(a.owned) == list(range(8))  # nothing dropped on a failed tick


async def test_listing_failing_keeps_the_fair_share_of_the_replicas_seen_last() -> None:
    kv, probes = FakeKV(), Probes()
    a, _b = await two_replicas(kv, probes)

    async def stream_leader_electing(name: str, subjects_filter: str) -> SimpleNamespace:
        raise TimeoutError("no answer")

    kv.stream_info = stream_leader_electing  # type: ignore[method-assign]
    gained, lost = await a.tick()  # renewals work, the listing does not
    assert (gained, lost) == (set(), set())
    assert sorted(a.owned) == [0, 1, 2, 3]


async def test_a_peer_of_an_older_version_is_not_probed() -> None:
    kv, probes = FakeKV(), Probes()
    a = replica(kv, "a-1", probes)
    await kv.put("replicas.old-1", b"alive")  # its heartbeat does not name it
    await a.tick()
    assert a.peers == {}
    assert await a.find_dead() == set()
    assert probes.asked == []


async def test_without_a_probe_nothing_is_evicted() -> None:
    kv = FakeKV()
    a, b = replica(kv, "a-1"), replica(kv, "a-2")
    for leases in (a, b, a, b, a):
        await leases.tick()
    assert await a.find_dead() == set()


async def test_an_eviction_the_bucket_does_not_answer_ends_at_once_and_is_tried_again() -> None:
    kv, probes = FakeKV(), Probes()
    a, _b = await two_replicas(kv, probes)
    probes.answers["a-2"] = False
    await a.find_dead()
    kv.hang = True  # the bucket's leader died too: one bounded call, not one per partition
    started = asyncio.get_running_loop().time()
    with pytest.raises(TimeoutError):
        await a.find_dead()
    assert asyncio.get_running_loop().time() - started < 0.5
    kv.hang = False
    assert await a.find_dead() == {"a-2"}  # still counted dead: the next round evicts
    gained, _ = await a.tick()
    assert gained == {4, 5, 6, 7}


async def test_the_probes_keep_their_own_clock_while_lease_ticks_keep_failing() -> None:
    # at load 35+ lease ticks time out and are retried every 0.25–1.7 s; the probes must still run every 0.5 s
    from eru_allocator.intake.routing import Partitions

    partitions = Partitions(None, "a-1", 8, 3.0, lambda _p, _s: None, probe_seconds=0.5)  # type: ignore[arg-type,return-value]
    probed: list[float] = []

    async def failing_tick() -> None:
        raise TimeoutError("the bucket does not answer")

    async def find_dead() -> set[str]:
        probed.append(asyncio.get_running_loop().time())
        return set()

    async def nothing(*_: object) -> None:
        return None

    partitions._tick = failing_tick  # type: ignore[method-assign]
    partitions.leases.probe = Probes()
    partitions.leases.find_dead = find_dead  # type: ignore[method-assign]
    partitions.leases.release_all = nothing  # type: ignore[method-assign]
    stopping = asyncio.Event()
    runner = asyncio.create_task(partitions.run(stopping))
    await asyncio.sleep(2.2)
    stopping.set()
    await runner
    # every 0.5 s (4 in 2.2 s) whatever the ticks did; probing only while no tick was due managed 2
    assert len(probed) >= 4, probed


async def test_the_live_replicas_do_not_depend_on_kv_keys_which_can_end_early() -> None:
    # nats-py 2.16's kv.keys() can stop at a premature "nothing pending" mark (nats-io/nats.py#842): here it lists
    # only the caller's own heartbeat, or nothing at all. Counted from it, a-1 would see itself alone and claim all 8.
    kv, probes = FakeKV(), Probes()
    a, _b = await two_replicas(kv, probes)

    async def ends_early() -> list[str]:
        return ["replicas.a-1", "p.0"]

    async def ends_before_the_first_key() -> list[str]:
        raise NoKeysError()

    for broken in (ends_early, ends_before_the_first_key):
        kv.keys = broken  # type: ignore[method-assign]
        assert await a.live_replicas() == ["a-1", "a-2"]
        assert a.peers == {"a-2": "a-2"}
        assert await a.tick() == (set(), set())
        assert sorted(a.owned) == [0, 1, 2, 3]


async def test_a_deleted_heartbeat_is_not_a_live_replica_though_its_marker_is_listed() -> None:
    kv, probes = FakeKV(), Probes()
    a, b = await two_replicas(kv, probes)
    await b.release_all()  # a clean stop: leases given back, heartbeat deleted (its marker stays until max age)
    assert "replicas.a-2" in kv.markers
    assert await a.live_replicas() == ["a-1"]
    assert a.peers == {}
    gained, _ = await a.tick()
    assert gained == {4, 5, 6, 7}


async def test_a_lease_expiring_inside_create_is_taken_at_the_next_tick_not_a_failed_tick() -> None:
    kv = FakeKV()
    await kv.create("p.5", b"gone-1")  # the lease of a replica that stopped without giving it back
    kv.expiring.add("p.5")
    a = replica(kv, "a-1")
    gained, _ = await a.tick()  # raised KeyNotFoundError out of the tick before
    assert gained == set(range(8)) - {5}
    gained, _ = await a.tick()
    assert gained == {5}
