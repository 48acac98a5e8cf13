"""What a lifecycle verb does to one container, by its ledger state: pure, no I/O.

| verb | acts on | unchanged (said so) | refused |
|---|---|---|---|
| stop | running | stopped | any other state |
| start | stopped | running | any other state |
| restart | running, stopped | — | any other state |
| dissociate | running, stopped, paused | removed, failed, lost | planned, creating, updating, stopping |

A stopped container keeps its allocation (it is live: `lifecycle.LIVE_STATES`); a dissociated one is `removed` on
the ledger (its resources return) and left on the engine. The ledger moves when the node agent confirms
(`lifecycle.transition`); a refused container refuses the whole request, before anything changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from eru_allocator.containers.lifecycle import GONE_STATES

ACTS_ON = {
    "stop": frozenset({"running"}),
    "start": frozenset({"stopped"}),
    "restart": frozenset({"running", "stopped"}),
    "dissociate": frozenset({"running", "stopped", "paused"}),
}
ALREADY = {"stop": frozenset({"stopped"}), "start": frozenset({"running"}), "dissociate": GONE_STATES}
# the state the container reaches once its agent confirms
TARGET = {"stop": "stopped", "start": "running", "restart": "running", "dissociate": "dissociated"}
VERB = {"stop": "stopping", "start": "starting", "restart": "restarting", "dissociate": "dissociating"}
DONE = {"stop": "stopped", "start": "started", "restart": "restarted", "dissociate": "dissociated"}


@dataclass(frozen=True)
class Decision:
    """A container's part in a request: the node command to send (`act`), or why it is left as it is (`note`) or
    why the whole request is refused (`refusal`)."""

    act: bool = False
    note: str | None = None
    refusal: str | None = None


def decide(action: str, container_id: str, state: str) -> Decision:
    """What `action` does to container `container_id` in ledger `state`."""
    if state in ACTS_ON[action]:
        return Decision(act=True)
    if state in ALREADY.get(action, frozenset()):
        return Decision(note=f"container {container_id} is already {state}")
    *first, last = sorted(ACTS_ON[action])
    wanted = f"{', '.join(first)} or {last}" if first else last
    return Decision(refusal=f"container {container_id} is {state}; only a {wanted} container can be {DONE[action]}")
