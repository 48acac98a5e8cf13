"""A deploy's end (docs/pipeline.md, step 6): once none of its containers is pending, its terminal event
(`completed`, `partial` with the failures, or `failed`) and its status; before that, `progress` events with what
reported in each batch. The deploy rows are locked by the caller, so exactly one transaction sees a deploy's last
pending container.

No I/O: `events.apply_events` reads each still planned deploy's members with its locks (before the batch's changes),
and the batch's rows as the state machine left them stand in for what they were (docs/store.md "Container events in
two statements"); the status updates and events returned here are written with the batch's other changes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from eru.activity import ACTIVITY
from eru.bus import Envelope, new_envelope
from eru.bus.subjects import deploy_event
from eru.domain import DeployEvent
from eru.store.container_events import EventMember, EventRow, FinishedDeploy
from eru.store.protocol import OutboxMessage
from eru_allocator.containers.lifecycle import Outcome, deploy_outcome

log = structlog.get_logger()


@dataclass
class Finished:
    """What a batch writes for its deploys: status updates (the JSON summary merged into `result`) and the events to
    queue in the outbox, in deploy id order."""

    statuses: list[FinishedDeploy] = field(default_factory=list)
    messages: list[OutboxMessage] = field(default_factory=list)


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def members_after(
    deploy_ids: Iterable[str], members: Iterable[EventMember], rows: Mapping[str, EventRow]
) -> dict[str, list[tuple[str, str, str | None]]]:
    """Each deploy's containers (id, state, reason) as the batch leaves them: the members read under the locks, with
    the batch's rows in place of their old selves (a replacement that took over counts from now on, as its deploy's
    member), in container id order. A deploy with no member yet (all its containers still pending replacements) is
    left out: it has nothing to report."""
    states: dict[str, dict[str, tuple[str, str | None]]] = {deploy_id: {} for deploy_id in deploy_ids}
    for member in members:
        if member.deploy_id in states:
            states[member.deploy_id][member.id] = (member.state, member.reason)
    for row in rows.values():
        of = states.get(row.deploy_id) if row.deploy_id is not None else None
        if of is None:
            continue
        if row.replaces is None:
            of[row.id] = (row.state, row.reason)
        else:
            of.pop(row.id, None)
    return {
        deploy_id: [(cid, state, reason) for cid, (state, reason) in sorted(of.items())]
        for deploy_id, of in states.items()
        if of
    }


def finish_deploys(
    source: str,
    members: Mapping[str, list[tuple[str, str, str | None]]],
    placements: Mapping[str, Any],
    causes: Mapping[str, Envelope],
    progress: Mapping[str, tuple[list[str], dict[str, str]]],
) -> Finished:
    """Terminal events and statuses for the deploys whose containers have all reported (`members`: still planned
    deploys, as the batch leaves them); `progress` events (what reported in this batch, incrementally) for the
    others, so a client following `eru.deploy.<id>.*` sees containers come up. `placements`: each deploy's
    `result.placements`, carried by its terminal event."""
    finished = Finished()
    for deploy_id in sorted(members):
        outcome: Outcome | None = deploy_outcome(members[deploy_id])
        if outcome is None:
            if deploy_id in progress:
                started, failed = progress[deploy_id]
                update = DeployEvent(deploy_id=deploy_id, kind="progress", started=sorted(started), failed=failed)
                envelope = new_envelope(
                    "eru.deploy.progress", source, correlation_id=deploy_id, causation=causes.get(deploy_id)
                )
                finished.messages.append(OutboxMessage(deploy_event(deploy_id, "progress"), update, envelope))
            continue
        summary = json.dumps({"started": outcome.started, "failed": outcome.failed})
        finished.statuses.append(FinishedDeploy(deploy_id, outcome.kind, summary))
        event = DeployEvent(
            deploy_id=deploy_id,
            kind=outcome.kind,
            placements=_loads(placements.get(deploy_id)) or {},
            started=outcome.started,
            failed=outcome.failed,
        )
        envelope = new_envelope(
            f"eru.deploy.{outcome.kind}", source, correlation_id=deploy_id, causation=causes.get(deploy_id)
        )
        finished.messages.append(OutboxMessage(deploy_event(deploy_id, outcome.kind), event, envelope))
        ACTIVITY.count(f"deploy.{outcome.kind}")
        log.debug(
            "deploy.finished",
            deploy_id=deploy_id,
            outcome=outcome.kind,
            started=len(outcome.started),
            failed=len(outcome.failed),
        )
    return finished
