"""A deploy's end from its members as the batch leaves them (eru_allocator.containers.deploy_outcomes): pure, no
store."""

from __future__ import annotations

from eru.bus import new_envelope
from eru.store.container_events import EventMember, EventRow
from eru_allocator.containers.deploy_outcomes import finish_deploys, members_after


def row(container_id: str, deploy_id: str, state: str, replaces: str | None = None) -> EventRow:
    return EventRow(container_id, deploy_id, "n1", state, None, "{}", None, "{}", replaces, "acme")


def test_the_batch_rows_stand_in_for_what_was_read() -> None:
    members = [
        EventMember("c1", "d1", "planned", None),
        EventMember("c2", "d1", "running", None),
        EventMember("x9", "d9", "planned", None),
    ]
    rows = {"c1": row("c1", "d1", "running")}
    assert members_after(["d1"], members, rows) == {"d1": [("c1", "running", None), ("c2", "running", None)]}


def test_a_replacement_counts_once_it_took_over_and_a_deploy_of_pending_replacements_has_nothing_to_report() -> None:
    rows = {"r1": row("r1", "d2", "running"), "r2": row("r2", "d3", "creating", replaces="o2")}
    after = members_after(["d2", "d3"], [], rows)
    assert after == {"d2": [("r1", "running", None)]}


def test_terminal_and_progress_events_in_deploy_order() -> None:
    members = {
        "d2": [("c3", "running", None)],
        "d1": [("c1", "running", None), ("c2", "planned", None)],
        "d3": [("c4", "failed", "image pull failed"), ("c5", "running", None)],
    }
    cause = new_envelope("eru.container.batch", "test")
    finished = finish_deploys(
        "test",
        members,
        {"d2": '{"n1": 1}', "d3": {"n1": 2}},
        {"d1": cause},
        {"d1": (["c1"], {}), "d2": (["c3"], {})},
    )
    assert [(d.id, d.status) for d in finished.statuses] == [("d2", "completed"), ("d3", "partial")]
    assert [m.subject for m in finished.messages] == [
        "eru.deploy.d1.progress",
        "eru.deploy.d2.completed",
        "eru.deploy.d3.partial",
    ]
    progress, completed, partial = (m.message for m in finished.messages)
    assert progress.model_dump()["started"] == ["c1"]
    assert finished.messages[0].envelope.causation_id == cause.id
    assert completed.model_dump()["placements"] == {"n1": 1}
    assert partial.model_dump()["failed"] == {"c4": "image pull failed"}
