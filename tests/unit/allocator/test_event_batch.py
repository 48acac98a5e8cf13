"""The allocator's container-event batch in memory (eru_allocator.containers.event_batch) and what it tells tenants: a
container that only changes state is written without its JSON columns, and the tenant's state change travels in the
`ContainerStateChange` wire form."""

from __future__ import annotations

import json
from dataclasses import replace

from eru.bus.codec import decode, encode_value, to_wire
from eru.domain import ContainerEvent
from eru.domain.messages import ContainerStateChange
from eru.store.container_events import EventRow
from eru_allocator.containers.event_batch import ContainerBatch
from eru_allocator.containers.events import state_change

ALLOCATION = {"cpu_map": {"3": 10}, "numa_node": None, "memory": 16 << 20}


def row(container_id: str, state: str = "planned", previous: str | None = None) -> EventRow:
    return EventRow(
        id=container_id,
        deploy_id="d1",
        node="n1",
        state=state,
        reason=None,
        allocation=json.dumps(ALLOCATION),
        previous_allocation=previous,
        resources="{}",
        replaces=None,
        tenant="team-a/web",
    )


def event(container_id: str, kind: str) -> ContainerEvent:
    return ContainerEvent(node="n1", container_id=container_id, deploy_id="d1", kind=kind)


def test_a_started_container_only_moves_its_state() -> None:
    batch = ContainerBatch({"c1": row("c1")}, {})
    batch.apply(event("c1", "started"))
    assert batch.rows["c1"].state == "running"
    assert batch.dirty == {"c1"}
    assert batch.reshaped == set(), "planned → running rewrites no JSON column"
    assert batch.usage == {}
    assert batch.progress == {"d1": (["c1"], {})}


def test_a_failed_container_gives_its_allocation_back() -> None:
    batch = ContainerBatch({"c1": row("c1")}, {})
    batch.apply(event("c1", "failed"))
    assert batch.rows["c1"].state == "failed"
    [usage] = batch.usage["n1"]
    assert dict(usage.cpu_map) == {"3": -10}
    assert usage.memory == -(16 << 20)
    assert batch.reshaped == set()


def test_an_updated_container_forgets_its_previous_allocation() -> None:
    batch = ContainerBatch({"c1": row("c1", "updating", previous=json.dumps(ALLOCATION))}, {})
    batch.apply(event("c1", "updated"))
    assert batch.rows["c1"].state == "running"
    assert batch.rows["c1"].previous_allocation is None
    assert batch.reshaped == {"c1"}


def test_the_tenants_state_change_is_the_models_wire_form() -> None:
    changed = replace(row("c1", "running"), reason="started")
    body = encode_value(state_change(changed))
    model = decode(body, ContainerStateChange)
    assert model == ContainerStateChange(container_id="c1", deploy_id="d1", state="running", reason="started")
    assert state_change(changed) == to_wire(model)
