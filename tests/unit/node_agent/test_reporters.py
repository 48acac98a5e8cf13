"""Who may report a container's event (eru.nodeagent.reporters): a node's message names only its node, a group's
results only nodes of the group; the error names the field of the first event that does not."""

from __future__ import annotations

import pytest

from eru.domain.messages import ContainerEvent, GroupEvents
from eru.errors import InvalidInput
from eru.nodeagent.reporters import check_group_events, check_node_events


def event(node: str, container_id: str = "c1") -> ContainerEvent:
    return ContainerEvent(node=node, container_id=container_id, kind="started")


def test_a_nodes_events_name_that_node() -> None:
    check_node_events("n1", [event("n1"), event("n1", "c2")], batch=True)
    with pytest.raises(InvalidInput, match="reported on the subject of node 'n1'") as caught:
        check_node_events("n1", [event("n1"), event("n2", "c2")], batch=True)
    assert caught.value.field == "events[1].node"
    with pytest.raises(InvalidInput) as caught:
        check_node_events("n1", [event("n2")], batch=False)
    assert caught.value.field == "node"


@pytest.mark.parametrize(
    ("nodes", "field"),
    [
        (["sim", "sim-001", "sim-12"], None),
        (["sim-001", "simx-001"], "events[1].node"),
        (["sim-a"], "events[0].node"),
        (["sim-001", "sim-002", "other"], "events[2].node"),
    ],
)
def test_a_groups_results_name_only_its_nodes(nodes: list[str], field: str | None) -> None:
    results = GroupEvents(group="sim", events=[event(node, f"c{i}") for i, node in enumerate(nodes)])
    if field is None:
        check_group_events(results)
        return
    with pytest.raises(InvalidInput, match="is not of group 'sim'") as caught:
        check_group_events(results)
    assert caught.value.field == field
