"""The container state machine and a deploy's terminal outcome: pure functions, no I/O.

States: `planned → creating → running → stopping → removed`, `planned|creating → failed`, `running → updating →
running` (realloc), `running ⇄ paused`, `running ⇄ stopped` (an operator's stop and start, docs/cli.md
"Workloads": a stopped container keeps its allocation), any acknowledged state `→ lost` (the node does not run it: the
reconciler). A container HOLDS its node resources in every state but `removed` and
`failed`, except a replacement (docs/planning.md) before it has taken over its predecessor's allocation. Unknown or
stale events change nothing: the bus delivers at least once and out of order across subjects.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LIVE_STATES = frozenset({"planned", "creating", "running", "updating", "paused", "stopping", "stopped"})
# Commands whose failure leaves the container as it was (the engine refused to stop or start it): the reason is
# recorded, the state stays (a failed `start` leaves a stopped container stopped, holding its allocation).
IN_PLACE_COMMANDS = frozenset({"stop", "start", "restart", "dissociate"})
GONE_STATES = frozenset({"removed", "failed", "lost"})
PENDING_STATES = frozenset({"planned", "creating"})


@dataclass(frozen=True)
class Transition:
    """What an event does to a container: its new state and whether its resources go back to the node."""

    state: str
    releases: bool = False
    restore_previous: bool = False
    clear_previous: bool = False


def holds_resources(state: str, is_pending_replacement: bool) -> bool:
    """Whether a container in `state` is charged on its node."""
    return state in LIVE_STATES and not is_pending_replacement


def transition(state: str, event: str, *, updating: bool = False, command: str | None = None) -> Transition | None:
    """The effect of a node agent's `event` (the result of a `command` of that kind, if any) on a container in
    `state`; None = ignore (stale or repeated)."""
    if state in GONE_STATES:
        return None
    if event == "dissociated":
        # the agent no longer manages it; the engine keeps it running: on our books it is gone (docs/cli.md)
        return Transition("removed", releases=True)
    if event == "failed" and command in IN_PLACE_COMMANDS:
        return Transition(state)
    if event == "removed":
        return Transition("removed", releases=True)
    if event == "lost":
        # the reconciler found that the node no longer runs it (docs/operations.md "Reconciling the ledger")
        return Transition("lost", releases=True)
    if event == "failed":
        if state == "updating" or updating:
            # a realloc the engine refused: the container keeps running with its original allocation
            return Transition("running", restore_previous=True)
        if state == "stopping":
            return None
        return Transition("failed", releases=True)
    if event == "started" and state == "stopped":
        return Transition("running")  # an operator's start or restart
    if event in ("started", "found", "unpaused"):
        return Transition("running") if state in ("planned", "creating", "paused") else None
    if event == "updated":
        return Transition("running", clear_previous=True) if state == "updating" else None
    if event == "paused":
        return Transition("paused") if state == "running" else None
    if event == "stopped":
        # only an operator's stop keeps the container stopped on our books; any other is stale
        return Transition("stopped") if state in ("running", "paused") and command == "stop" else None
    return None


@dataclass(frozen=True)
class Outcome:
    """A deploy's terminal event: `completed`, `partial` or `failed`, with what started and what failed and why."""

    kind: str
    started: list[str]
    failed: dict[str, str]


def deploy_outcome(containers: Sequence[tuple[str, str, str | None]]) -> Outcome | None:
    """The terminal outcome once no container of the deploy is pending, else None.

    `containers` are (id, state, reason). A container removed before it ever reported counts as failed.
    """
    if any(state in PENDING_STATES for _, state, _ in containers):
        return None
    started = sorted(cid for cid, state, _ in containers if state not in GONE_STATES)
    failed = {cid: (reason or state) for cid, state, reason in containers if state in GONE_STATES}
    if not failed:
        return Outcome("completed", started, {})
    if started:
        return Outcome("partial", started, dict(sorted(failed.items())))
    return Outcome("failed", [], dict(sorted(failed.items())))


def map_delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """`after - before` per key (keys with no change left out)."""
    keys = set(before) | set(after)
    delta = {key: after.get(key, 0) - before.get(key, 0) for key in keys}
    return {key: value for key, value in sorted(delta.items()) if value}
