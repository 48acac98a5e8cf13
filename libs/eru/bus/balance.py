"""Work-aware balancing of leased partitions between replicas (docs/replicas.md "Busy partitions move").

The fair share (`eru.bus.leases.fair_share`) spreads partitions by *count*; the work is not spread evenly by count:
with a few busy pods, two of them (or a busy pod and the lead's relaying) can sit on one replica while another plans
nothing. So each replica tells the others, on `eru.partition.work` (a `WorkReport`, every tick and whenever its busy
set changes), which partitions it holds and which of them are *busy*, and a replica with two or more units of work
hands partitions, one per idle peer, over to idle peers. A *unit* is a busy partition, or the lead's relaying
(holding partition `LEAD`); a peer is idle with no unit. Everything here is pure: reports and counts in, moves out.

Worked numbers, 16 partitions over three replicas a (0-5), b (6-10), c (11-15), pods `bench0` (partition 5) and
`bench1` (partition 3) both busy: a has three units (the lead, 3, 5), b and c none. `handovers` gives the lead to b
(the cheapest move: relaying and node reports change hands, no request is in flight there) and partition 5 to c.
Then a, b and c have one unit each and nothing moves again. With only `bench` (partition 5) busy: a gives the lead
to b; c stays idle.

No ping-pong: a move goes from a replica with at least two units to one with none, and a partition received stays
counted busy (and is never given away) for `HOLD_SECONDS`. After a move the giver still has a unit and the receiver
has one, so neither is the other's idle peer; every move lowers the sum over replicas of (units - 1) for those
above one. Concurrent givers do not pick the same peer twice: a report names the partitions it handed over until
their receiver reports holding them, and a peer named there is not idle.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from pydantic import BaseModel, ConfigDict, Field

LEAD = 0  # the holder of this partition relays the outbox and reads node reports at full speed
BUSY_REQUESTS = 16  # requests planned in a partition within the last two windows that make it busy
HOLD_SECONDS = 10.0  # a partition received stays busy and is not given away for this long


class WorkReport(BaseModel):
    """What one replica holds and works on (`eru.partition.work`, core NATS, allocators only)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    replica: str = Field(description="the replica's token in the lease bucket (the value of the leases it holds)")
    owned: tuple[int, ...] = Field(default=(), description="the partitions it leases")
    busy: tuple[int, ...] = Field(default=(), description="those of them with work: planned or just received")
    handed: dict[int, str] = Field(
        default_factory=dict, description="partitions it handed over, by receiver, until the receiver holds them"
    )


def busy_partitions(
    previous: Mapping[int, int], current: Mapping[int, int], owned: Collection[int], threshold: int = BUSY_REQUESTS
) -> frozenset[int]:
    """The owned partitions that planned at least `threshold` requests over the last two windows (pure).

    >>> sorted(busy_partitions({5: 10}, {5: 6, 3: 2}, {0, 3, 5}))
    [5]
    """
    return frozenset(p for p in owned if previous.get(p, 0) + current.get(p, 0) >= threshold)


def units(owned: Collection[int], busy: Collection[int]) -> int:
    """A replica's units of work: its busy partitions, and the lead's relaying when it holds `LEAD` (once, even when
    partition `LEAD` is busy itself).

    >>> units({0, 1, 5}, {5}), units({0}, {0}), units({6, 7}, ())
    (2, 1, 0)
    """
    return len(set(busy) | ({LEAD} & set(owned)))


def handovers(mine: WorkReport, peers: Mapping[str, WorkReport], keep: Collection[int] = ()) -> list[tuple[int, str]]:
    """The partitions this replica hands over now, each to an idle peer: `(partition, peer)` in order (pure).

    While this replica has two units or more and a peer has none, it gives one: first the lead (`LEAD`, when held),
    then its busy partitions from the highest number down, never one of `keep` (received within `HOLD_SECONDS`);
    idle peers are taken in name order. A peer some report names as the receiver of a handover is not idle.

    >>> a = WorkReport(replica="a", owned=(0, 1, 2, 3, 4, 5), busy=(3, 5))
    >>> b, c = WorkReport(replica="b", owned=(6, 7)), WorkReport(replica="c", owned=(11,))
    >>> handovers(a, {"b": b, "c": c})
    [(0, 'b'), (5, 'c')]
    """
    reports = [mine, *peers.values()]
    receiving = {peer for report in reports for peer in report.handed.values()}
    idle = sorted(
        name
        for name, report in peers.items()
        if name != mine.replica and name not in receiving and units(report.owned, report.busy) == 0
    )
    held = set(mine.owned)
    givable = ([LEAD] if LEAD in held else []) + sorted(set(mine.busy) & held - {LEAD}, reverse=True)
    left = units(mine.owned, mine.busy)
    moves = []
    for partition in givable:
        if left < 2 or not idle:
            break
        if partition in keep:
            continue
        moves.append((partition, idle.pop(0)))
        left -= 1
    return moves


def surplus(owned: Collection[int], fair: int, busy: Collection[int] = ()) -> set[int]:
    """The partitions given back when holding more than the fair share: idle ones first, from the highest number
    down, then busy ones, `LEAD` last (pure).

    >>> sorted(surplus({0, 5, 6, 7, 8, 9, 10}, 6, busy={10}))
    [9]
    >>> sorted(surplus({0, 1, 2}, 1, busy={1, 2}))
    [1, 2]
    """
    extra = len(owned) - fair
    if extra <= 0:
        return set()
    rest = set(owned) - {LEAD}
    order = sorted(rest - set(busy), reverse=True) + sorted(rest & set(busy), reverse=True)
    order += [LEAD] if LEAD in owned else []
    return set(order[:extra])


class WorkLedger:
    """One replica's side of the balancing: its planned counts per partition, the partitions it received and handed
    over, and the peers' last reports with the time each was heard. Deterministic: every method takes the time
    (the caller's monotonic clock), nothing here reads a clock or does I/O."""

    def __init__(self, me: str, fresh_seconds: float, threshold: int = BUSY_REQUESTS) -> None:
        self.me = me
        self.fresh_seconds = fresh_seconds  # a report older than this is no evidence (its replica may be gone)
        self.threshold = threshold
        self.previous: dict[int, int] = {}
        self.current: dict[int, int] = {}
        self.received_at: dict[int, float] = {}
        self.handed: dict[int, tuple[str, float]] = {}
        self.heard_at: dict[str, tuple[WorkReport, float]] = {}

    def planned(self, partition: int) -> bool:
        """Count a request planned in `partition`; True exactly when that makes the partition busy."""
        self.current[partition] = self.current.get(partition, 0) + 1
        return self.previous.get(partition, 0) + self.current[partition] == self.threshold

    def roll(self) -> None:
        """Start a new window (every lease tick): the counts of the last two windows decide what is busy."""
        self.previous, self.current = self.current, {}

    def received(self, partition: int, now: float) -> None:
        """A peer handed `partition` to this replica (it adopted the lease)."""
        self.received_at[partition] = now

    def gave(self, partition: int, peer: str, now: float) -> None:
        """This replica handed `partition` to `peer`; reports say so until the peer reports holding it."""
        self.handed[partition] = (peer, now)
        self.received_at.pop(partition, None)

    def recent(self, now: float) -> frozenset[int]:
        """The partitions received within `HOLD_SECONDS`: counted busy and never given away meanwhile."""
        return frozenset(p for p, at in self.received_at.items() if now - at < HOLD_SECONDS)

    def report(self, owned: Collection[int], now: float) -> WorkReport:
        """This replica's report now."""
        busy = busy_partitions(self.previous, self.current, owned, self.threshold) | (self.recent(now) & set(owned))
        self.handed = {p: (peer, at) for p, (peer, at) in self.handed.items() if now - at < self.fresh_seconds}
        return WorkReport(
            replica=self.me,
            owned=tuple(sorted(owned)),
            busy=tuple(sorted(busy)),
            handed={p: peer for p, (peer, _) in sorted(self.handed.items())},
        )

    def heard(self, report: WorkReport, now: float) -> set[int]:
        """Keep a peer's report; returns the partitions it says it handed to this replica."""
        if report.replica == self.me:
            return set()
        self.heard_at[report.replica] = (report, now)
        for partition in set(report.owned) & set(self.handed):
            if self.handed[partition][0] == report.replica:
                del self.handed[partition]
        return {p for p, peer in report.handed.items() if peer == self.me}

    def peers(self, live: Collection[str], now: float) -> dict[str, WorkReport]:
        """The fresh reports of the `live` peers (a replica found dead, or silent for `fresh_seconds`, is none)."""
        return {
            name: report
            for name, (report, at) in self.heard_at.items()
            if name in live and name != self.me and now - at < self.fresh_seconds
        }

    def moves(self, owned: Collection[int], live: Collection[str], now: float) -> list[tuple[int, str]]:
        """The handovers due now (`handovers` over this replica's report and its live peers' fresh ones)."""
        return handovers(self.report(owned, now), self.peers(live, now), keep=self.recent(now))
