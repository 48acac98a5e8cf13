"""How fast a replica reads a shared intake it may only have to pass on (docs/replicas.md "Who reads the intake").

Every allocator replica reads the shared deploy intake, but a request is planned by the replica leasing its pod's
partition; any other replica routes it through ERU_PARTITIONS, one more JetStream write, fetch and acknowledgement.
With one busy pod and three replicas, two thirds of the requests took that detour. So a replica paces its intake
fetches by what it found there (pure: counts in, next pace out; the consumer only waits and fetches):

* it found work of its own since the last fetch → full batches, no wait (the owner drains the intake at its pace);
* it found only work to pass on → one message at a time, after a wait that doubles from `FLOOR_SECONDS` up to
  `CAP_SECONDS` (the owner reads the rest itself, each request once);
* it found nothing (an empty fetch, or the handlers have not decided yet) → unchanged.

A replica starts with one message and no wait: its first request tells it which kind it is. Every replica keeps
fetching at least once per `CAP_SECONDS`, so a request is never stranded: while its pod has no owner (a lease
moving) it is routed to the partition as before, and the replica that gains partitions resets its pace
(`Pace.start`) so that it reads at full speed at once when the work is now its own.

Worked numbers, one busy pod, three replicas: the two non-owners route 1 request each at 0, 0.05, 0.15, 0.35, 0.75,
1.55, 2.55 s … into a 2,000-request burst of ~2.5 s: ~14 routed instead of ~1,330.
"""

from __future__ import annotations

from dataclasses import dataclass

FLOOR_SECONDS = 0.05
CAP_SECONDS = 1.0


@dataclass(frozen=True)
class Pace:
    """The next fetch: wait `delay` seconds, then take at most `batch` messages (0 means the consumer's full batch)."""

    batch: int = 1
    delay: float = 0.0

    @classmethod
    def start(cls) -> Pace:
        """A fresh replica's pace: one message at once (what it finds decides the rest)."""
        return cls()

    def size(self, full: int) -> int:
        """How many to fetch when `full` would be fetched unpaced."""
        return full if self.batch == 0 else min(full, self.batch)


def next_pace(pace: Pace, local: int, routed: int) -> Pace:
    """The pace after `local` requests planned here and `routed` passed on since the last fetch (pure).

    >>> next_pace(Pace(), 0, 1)
    Pace(batch=1, delay=0.05)
    >>> next_pace(Pace(1, 0.8), 0, 3)
    Pace(batch=1, delay=1.0)
    >>> next_pace(Pace(1, 1.0), 1, 40)
    Pace(batch=0, delay=0.0)
    >>> next_pace(Pace(1, 0.4), 0, 0)
    Pace(batch=1, delay=0.4)
    """
    if local > 0:
        return Pace(batch=0, delay=0.0)
    if routed > 0:
        return Pace(batch=1, delay=min(CAP_SECONDS, max(FLOOR_SECONDS, pace.delay * 2)))
    return pace
