"""The results of recent commands, kept compactly for idempotency (docs/node-agent.md "Idempotent").

A result is kept as its msgpack body (~300 bytes; the `ContainerEvent` model with its allocation is ~2 KB in memory)
and decoded only when a repeat asks for it, which is rare. It is kept while a repeat can still arrive: while the
command's message can be redelivered (`max_deliver` × `ack_wait`) plus the node stream's duplicate window in which a
republished copy is still dropped — 5 × 60 s + 120 s = 420 s by default — and never more than the last 10,000. The
time is the agent's own run time: entries loaded from a state file count from the load, so an agent that was down
for a day still recognises the redeliveries that come when it starts again.

At 50 deploys/s of 1–5 containers with churn over 16 simulated nodes (~19 commands/s per node) that is ~8,000
results per node, ~4 MB per node instead of ~20 MB, reached after 7 minutes and flat from then on.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from eru.bus.codec import decode, encode
from eru.domain.messages import ContainerEvent

MAX_REMEMBERED_COMMANDS = 10_000
REMEMBER_SECONDS = 5 * 60.0 + 120.0  # max_deliver × ack_wait + the duplicate window of ERU_NODE


@dataclass(frozen=True, slots=True)
class Remembered:
    """One result: when it was remembered (agent clock) and its body."""

    at: float
    body: bytes

    @property
    def event(self) -> ContainerEvent:
        """The result as a model."""
        return decode(self.body, ContainerEvent)


class RememberedResults(Mapping[str, ContainerEvent]):
    """Command id → result, oldest first, bounded by age and by count."""

    def __init__(
        self,
        *,
        max_count: int = MAX_REMEMBERED_COMMANDS,
        keep_seconds: float = REMEMBER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_count = max_count
        self.keep_seconds = keep_seconds
        self.clock = clock
        self.entries: OrderedDict[str, Remembered] = OrderedDict()

    def __getitem__(self, command_id: str) -> ContainerEvent:
        return self.entries[command_id].event

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, command_id: object) -> bool:
        return command_id in self.entries

    def remember(self, command_id: str, event: ContainerEvent) -> None:
        """Keep `event` as the result of `command_id` (a repeat moves to the end), forgetting what is too old."""
        self.put(command_id, Remembered(self.clock(), encode(event)))

    def put(self, command_id: str, entry: Remembered) -> None:
        """Keep an entry as it is (what a store hands back), then forget what is beyond the bounds."""
        self.entries[command_id] = entry
        self.entries.move_to_end(command_id)
        self.prune()

    def prune(self) -> None:
        """Forget the oldest entries beyond the count and those older than `keep_seconds`."""
        entries = self.entries
        while len(entries) > self.max_count:
            entries.popitem(last=False)
        horizon = self.clock() - self.keep_seconds
        while entries:
            oldest = next(iter(entries.values()))
            if oldest.at >= horizon:
                break
            entries.popitem(last=False)

    def copy(self) -> RememberedResults:
        """A copy with the same bounds (entries are immutable and shared)."""
        twin = RememberedResults(max_count=self.max_count, keep_seconds=self.keep_seconds, clock=self.clock)
        twin.entries = OrderedDict(self.entries)
        return twin
