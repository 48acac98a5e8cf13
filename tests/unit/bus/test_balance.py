"""Work-aware partition balancing (docs/replicas.md "Busy partitions move"): the pure rules of `eru.bus.balance`
(units, handovers, surplus, busy windows), the ledger's bookkeeping with an explicit clock, no ping-pong over many
random situations, and a lease handed over and adopted on an in-memory KV with NATS KV's revision rules."""

from __future__ import annotations

import random

from tests.unit.bus.test_lease_takeover import FakeKV, replica

from eru.bus.balance import (
    BUSY_REQUESTS,
    HOLD_SECONDS,
    LEAD,
    WorkLedger,
    WorkReport,
    busy_partitions,
    handovers,
    surplus,
    units,
)
from eru.bus.codec import decode, encode
from eru.bus.leases import PartitionLeases


def report(name: str, owned: range | tuple[int, ...], busy: tuple[int, ...] = (), **handed: int) -> WorkReport:
    return WorkReport(replica=name, owned=tuple(owned), busy=busy, handed={p: peer for peer, p in handed.items()})


def test_units_count_busy_partitions_and_the_lead_once() -> None:
    assert units((0, 1, 2), ()) == 1  # the lead's relaying
    assert units((0, 1, 2), (0,)) == 1  # a busy pod on the lead's partition: still one process's work
    assert units((0, 3, 5), (3, 5)) == 3
    assert units((6, 7), ()) == 0
    assert units((6, 7), (7,)) == 1


def test_two_busy_pods_and_the_lead_on_one_replica_spread_over_three() -> None:
    # the bench's two pods: bench0 -> partition 5, bench1 -> partition 3, both in the first replica's block
    a, b, c = report("a", range(6), (3, 5)), report("b", range(6, 11)), report("c", range(11, 16))
    assert handovers(a, {"b": b, "c": c}) == [(LEAD, "b"), (5, "c")]
    # the others have nothing to give
    assert handovers(b, {"a": a, "c": c}) == []
    assert handovers(c, {"a": a, "b": b}) == []


def test_one_busy_pod_on_the_lead_gives_the_lead_away() -> None:
    a, b, c = report("a", range(6), (5,)), report("b", range(6, 11)), report("c", range(11, 16))
    assert handovers(a, {"b": b, "c": c}) == [(LEAD, "b")]
    # a busy pod elsewhere: the lead alone is one unit, nobody moves
    assert handovers(report("a", range(6)), {"b": report("b", range(6, 11), (8,)), "c": c}) == []


def test_nothing_moves_without_an_idle_peer_or_below_two_units() -> None:
    a = report("a", range(6), (3, 5))
    busy_peers = {"b": report("b", range(6, 11), (7,)), "c": report("c", range(11, 16), (12,))}
    assert handovers(a, busy_peers) == []
    assert handovers(report("a", range(1, 6), (3,)), {"b": report("b", range(6, 11))}) == []
    assert handovers(a, {}) == []


def test_a_peer_named_as_a_receiver_is_not_idle_and_kept_partitions_stay() -> None:
    a, b, c = report("a", range(6), (3, 5)), report("b", range(6, 11)), report("c", range(11, 16))
    d = report("d", (12,), (12,), b=9)  # busy, and it just handed partition 9 to b
    assert handovers(a, {"b": b, "c": c, "d": d}) == [(LEAD, "c")]
    # the lead just received: kept; the busy partitions go instead
    assert handovers(a, {"b": b, "c": c}, keep={LEAD}) == [(5, "b"), (3, "c")]
    assert handovers(a, {"b": b, "c": c}, keep={LEAD, 5}) == [(3, "b")]


def test_surplus_gives_idle_partitions_first_and_the_lead_last() -> None:
    assert surplus({0, 5, 6, 7, 8, 9, 10}, 6, busy={10}) == {9}
    assert surplus({0, 5, 6, 7, 8, 9, 10}, 6) == {10}  # as before: the highest first
    assert surplus({0, 1, 2}, 1, busy={1, 2}) == {1, 2}
    assert surplus({0, 1, 2}, 0) == {0, 1, 2}
    assert surplus({0, 1}, 2) == set()


def test_busy_needs_enough_requests_over_two_windows_in_owned_partitions() -> None:
    half = BUSY_REQUESTS // 2
    assert busy_partitions({5: half}, {5: half, 3: 1}, {3, 5}) == {5}
    assert busy_partitions({5: half}, {5: half - 1}, {3, 5}) == frozenset()
    assert busy_partitions({5: BUSY_REQUESTS}, {}, {3}) == frozenset()  # handed away: not ours


def test_the_ledger_reports_busy_and_received_partitions_and_forgets_old_windows() -> None:
    ledger = WorkLedger("a", fresh_seconds=3.4)
    became = [ledger.planned(5) for _ in range(BUSY_REQUESTS + 3)]
    assert became.count(True) == 1
    assert became[BUSY_REQUESTS - 1]
    assert ledger.report({0, 5}, now=0.0).busy == (5,)
    ledger.roll()
    assert ledger.report({0, 5}, now=1.0).busy == (5,)  # the last two windows count
    ledger.roll()
    assert ledger.report({0, 5}, now=2.0).busy == ()
    ledger.received(7, now=2.0)
    assert ledger.report({0, 5, 7}, now=2.0 + HOLD_SECONDS - 0.1).busy == (7,)
    assert ledger.report({0, 5, 7}, now=2.0 + HOLD_SECONDS).busy == ()


def test_the_ledger_names_a_handover_until_the_receiver_holds_it() -> None:
    ledger = WorkLedger("a", fresh_seconds=3.4)
    ledger.gave(5, "c", now=10.0)
    assert ledger.report({0}, now=10.0).handed == {5: "c"}
    assert ledger.heard(report("c", (11, 12)), now=10.5) == set()
    assert ledger.report({0}, now=10.5).handed == {5: "c"}
    ledger.heard(report("c", (5, 11, 12), (5,)), now=10.6)
    assert ledger.report({0}, now=10.6).handed == {}
    ledger.gave(6, "b", now=20.0)  # never adopted: no longer said after fresh_seconds
    assert ledger.report({0}, now=23.5).handed == {}


def test_the_ledger_adopts_what_is_handed_to_it_and_trusts_only_fresh_live_reports() -> None:
    ledger = WorkLedger("b", fresh_seconds=3.4)
    assert ledger.heard(report("a", (1, 2), (1, 2), b=0), now=5.0) == {0}
    assert ledger.heard(report("b", (0,), b=0), now=5.0) == set()  # its own report, echoed by NATS
    ledger.heard(report("c", (9,)), now=1.0)
    assert set(ledger.peers({"a", "c"}, now=5.1)) == {"a"}  # c's report is stale
    assert set(ledger.peers({"c"}, now=5.1)) == set()  # a is not live (found dead)
    # b holds the lead, a holds two busy partitions, nobody is idle: nothing moves
    assert ledger.moves({0}, {"a"}, now=5.2) == []


def test_the_report_travels_as_msgpack() -> None:
    sent = report("a-1", range(6), (3, 5), **{"a-2": 0})
    assert decode(encode(sent), WorkReport) == sent


def test_no_ping_pong_handovers_settle_in_a_few_moves() -> None:
    """Random holdings and busy sets over 2-5 replicas: applying every replica's handovers in turn (each receiver's
    partition counted busy, as `HOLD_SECONDS` makes it) settles after at most one move per replica's surplus unit,
    and a settled state moves nothing."""
    rng = random.Random(14)
    for _ in range(300):
        names = [f"r{i}" for i in range(rng.randint(2, 5))]
        owner = {p: rng.choice(names) for p in range(16)}
        busy = set(rng.sample(range(16), rng.randint(0, 6)))
        start = sum(max(0, u - 1) for u in _units(names, owner, busy).values())
        moves = 0
        for _round in range(10):
            moved = False
            for name in names:
                reports = _reports(names, owner, busy)
                for partition, peer in handovers(reports[name], {n: r for n, r in reports.items() if n != name}):
                    owner[partition] = peer
                    if partition != LEAD:
                        busy.add(partition)
                    moves += 1
                    moved = True
            if not moved:
                break
        assert not moved, "still moving after 10 rounds"
        assert moves <= start
        final = _units(names, owner, busy)
        assert max(final.values()) <= 1 or min(final.values()) >= 1  # nobody idle while someone has two


def _units(names: list[str], owner: dict[int, str], busy: set[int]) -> dict[str, int]:
    return {
        n: units([p for p, o in owner.items() if o == n], busy & {p for p, o in owner.items() if o == n}) for n in names
    }


def _reports(names: list[str], owner: dict[int, str], busy: set[int]) -> dict[str, WorkReport]:
    held = {n: tuple(sorted(p for p, o in owner.items() if o == n)) for n in names}
    return {n: WorkReport(replica=n, owned=held[n], busy=tuple(sorted(busy & set(held[n])))) for n in names}


async def test_a_lease_handed_over_is_adopted_by_its_receiver_only() -> None:
    kv = FakeKV()
    a, b, c = (_leases(kv, name) for name in ("a", "b", "c"))
    await a.tick()
    assert sorted(a.owned) == list(range(8))
    assert await a.transfer(5, "b")
    assert 5 not in a.owned
    assert kv.owner(5) == "b"
    assert not await c.adopt(5)  # not handed to c
    assert await b.adopt(5)
    assert 5 in b.owned
    assert kv.owner(5) == "b"
    await b.tick()  # renewed like any of its leases
    assert kv.owner(5) == "b"
    assert 5 in b.owned
    assert not await b.adopt(5)  # already held
    # a lease renewed meanwhile (not at the revision we hold) is not handed
    a.owned[6] -= 1
    assert not await a.transfer(6, "c")
    assert kv.owner(6) == "a"


async def test_a_busy_partition_stays_when_giving_back_surplus() -> None:
    kv = FakeKV()
    a, b = _leases(kv, "a"), _leases(kv, "b")
    await a.tick()
    await b.tick()
    _, lost = await a.tick(busy=frozenset({6, 7}))
    assert lost == {2, 3, 4, 5}  # fair share 4 of 8: the idle ones from the top go, the busy and the lead stay
    assert sorted(a.owned) == [0, 1, 6, 7]


def _leases(kv: FakeKV, name: str) -> PartitionLeases:
    return replica(kv, name)  # the fake answers the bucket's stream info (the live listing) too
