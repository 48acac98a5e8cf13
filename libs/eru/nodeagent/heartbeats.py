"""Heartbeats a message per process (docs/node-agent.md "Idle cost"): the pure decisions.

A sim node-agent process serving many nodes sends their heartbeats as one `NodeHeartbeats` message per interval on
`eru.heartbeats.<group>` (`chunks` cuts a large process's beats into messages); the allocator takes a group's
message only for the group's own nodes (`check_group`) and counts the beats of nodes it does not know yet
(`UnknownBeats`) instead of logging each: during a mass registration a node's first beats may arrive before its
registration row is written, which is no fault.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from eru.domain.messages import HEARTBEATS_MAX, Heartbeat, NodeHeartbeats
from eru.errors import InvalidInput

IDS_PER_MESSAGE = 20_000  # container ids in one message (~40 bytes each): well under the bus's 1 MiB
UNKNOWN_GRACE_SECONDS = 30.0  # a node still unknown this long after its first beat is "lasting" (registration lost)
UNKNOWN_SUMMARY_SECONDS = 60.0  # at most one summary line of unknown beats this often
UNKNOWN_EXAMPLES = 5  # lasting unknown nodes named in a summary


def chunks(
    beats: Sequence[Heartbeat], max_nodes: int = HEARTBEATS_MAX, max_ids: int = IDS_PER_MESSAGE
) -> Iterator[list[Heartbeat]]:
    """`beats` in order, in messages of at most `max_nodes` nodes and about `max_ids` container ids (a node with
    more ids than that goes alone)."""
    part: list[Heartbeat] = []
    ids = 0
    for beat in beats:
        if part and (len(part) >= max_nodes or ids + len(beat.containers) > max_ids):
            yield part
            part, ids = [], 0
        part.append(beat)
        ids += len(beat.containers)
    if part:
        yield part


def in_group(group: str, node: str) -> bool:
    """Whether `node` is one of command group `group`'s nodes: `<group>` or `<group>-<number>` (eru.stack names a
    sim process's nodes `sim-001` … for group `sim`)."""
    if node == group:
        return True
    prefix = group + "-"
    return node.startswith(prefix) and node[len(prefix) :].isdigit()


def check_group(beats: NodeHeartbeats, subject_group: str) -> None:
    """The message is of the group of its subject (`eru.heartbeats.<group>`, the only one its process may publish
    on) and every beat is of a node of that group; else InvalidInput naming `group` or the beat's `node` field (a
    process speaks only for its own nodes)."""
    if beats.group != subject_group:
        raise InvalidInput("group", f"group {beats.group!r} sent on the subject of group {subject_group!r}")
    for index, beat in enumerate(beats.beats):
        if not in_group(beats.group, beat.node):
            raise InvalidInput(f"beats[{index}].node", f"node {beat.node!r} is not of group {beats.group!r}")


@dataclass(frozen=True)
class UnknownSummary:
    """What `UnknownBeats` has counted since its last summary: beats of unknown nodes, the nodes, and those unknown
    longer than the grace (`lasting`, with a few `examples`)."""

    beats: int
    nodes: int
    lasting: int
    examples: tuple[str, ...]


@dataclass
class UnknownBeats:
    """Heartbeats of nodes the ledger does not know, counted: at most one summary every `summary_seconds`, never a
    line per node. `first` is bounded by `limit` (a flood of made-up names starts the count again)."""

    grace_seconds: float = UNKNOWN_GRACE_SECONDS
    summary_seconds: float = UNKNOWN_SUMMARY_SECONDS
    limit: int = 100_000
    first: dict[str, float] = field(default_factory=dict)  # node → when its first unknown beat came
    beats: int = 0  # unknown beats since the last summary
    nodes: set[str] = field(default_factory=set)  # unknown nodes since the last summary
    last_summary: float | None = None

    def seen(self, nodes: Sequence[str], known: set[str] | frozenset[str], now: float) -> UnknownSummary | None:
        """Note a batch of beats (`known`: those of its nodes the ledger has, which are forgotten as unknown); the
        summary to log when one is due and there is something to say, else None."""
        for node in nodes:
            if node in known:
                self.first.pop(node, None)
                continue
            if node not in self.first and len(self.first) >= self.limit:
                self.first.clear()
            self.first.setdefault(node, now)
            self.beats += 1
            if len(self.nodes) < self.limit:
                self.nodes.add(node)
        if self.last_summary is None:
            self.last_summary = now
        if not self.beats or now - self.last_summary < self.summary_seconds:
            return None
        lasting = sorted(node for node, first in self.first.items() if now - first >= self.grace_seconds)
        summary = UnknownSummary(self.beats, len(self.nodes), len(lasting), tuple(lasting[:UNKNOWN_EXAMPLES]))
        self.beats = 0
        self.nodes = set()
        self.last_summary = now
        return summary
