"""Which command group serves a node, as the allocator last heard it (docs/node-agent.md "One message per group").

A sim process with a command group sends its nodes' heartbeats as one `NodeHeartbeats` on `eru.heartbeats.<group>`
every heartbeat interval; the allocator's handler notes here each node of it with its group and the time. The deploy
path (`eru_allocator.deploy.creates.command_messages`) then sends the creates of one transaction for nodes of one
group as one `GroupCommands` message, without a statement of its own. A node not heard in a group's heartbeats for
`FRESH_SECONDS` (a Docker agent, a sim process without a group, a replica that has not yet taken one of the
group's heartbeats, a process gone) keeps its own per-node messages, which its group's consumer reads as well.

Process-wide, as `eru.activity.ACTIVITY`: it is a fact about the cluster, not about one batch or pod. An allocator
starts from nothing heard (`NodeReports` forgets it), so an in-process stack of a test never inherits an earlier
one's groups.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

# a node heard in its group's heartbeats this recently is sent its creates in the group's message (heartbeats go
# every `heartbeat_interval_seconds`, 1–5 s; a node missing from them this long is being declared down anyway)
FRESH_SECONDS = 30.0


class CommandGroups:
    """node → (its command group, when it was last heard in that group's heartbeats)."""

    def __init__(self, fresh_seconds: float = FRESH_SECONDS) -> None:
        self.fresh_seconds = fresh_seconds
        self._nodes: dict[str, tuple[str, float]] = {}

    def heard(self, group: str, nodes: Iterable[str], now: float | None = None) -> None:
        """`nodes` beat in `group`'s heartbeats (already checked to be the group's: `check_group`)."""
        at = time.monotonic() if now is None else now
        entry = (group, at)
        for node in nodes:
            self._nodes[node] = entry

    def group_of(self, node: str, now: float) -> str | None:
        """The group serving `node`, if it was heard in its heartbeats within `fresh_seconds` of `now`."""
        entry = self._nodes.get(node)
        if entry is None or now - entry[1] > self.fresh_seconds:
            return None
        return entry[0]

    def forget(self) -> None:
        """Forget every node (an allocator starting)."""
        self._nodes.clear()


COMMAND_GROUPS = CommandGroups()
