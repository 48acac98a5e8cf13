"""Inventories a message per process (docs/node-agent.md "Idle cost"): a node of a command group hands its inventory
to the process's batch, which a flush publishes as one `NodeInventories` (`chunks`); the allocator takes it only for
the group's own nodes on the group's own subject (`check_group`)."""

from __future__ import annotations

import pytest

from eru.domain.inventory import INVENTORIES_MAX, InventoryEntry, NodeInventories, NodeInventory
from eru.errors import InvalidInput
from eru.nodeagent.group_inventories import check_group, chunks
from eru.settings import load_settings
from eru_node_agent import group_inventories
from eru_node_agent.agent import NodeAgent
from eru_node_agent.app import build_agents


def inventory(node: str, listed: int = 0) -> NodeInventory:
    return NodeInventory(
        node=node,
        agent="run-1",
        taken_at=1.0,
        containers=[InventoryEntry(container_id=f"{node}-c{i}", managed=True, node=node) for i in range(listed)],
    )


def test_a_flush_of_up_to_a_thousand_nodes_is_one_message_in_order() -> None:
    taken = [inventory(f"sim-{i:04d}") for i in range(2500)]
    sent = list(chunks(taken))
    assert [len(part) for part in sent] == [INVENTORIES_MAX, INVENTORIES_MAX, 500]
    assert [i.node for part in sent for i in part] == [i.node for i in taken]


def test_listed_containers_cut_messages_too_and_a_node_listing_more_goes_alone() -> None:
    taken = [inventory("sim-1", 4), inventory("sim-2", 4), inventory("sim-3", 12), inventory("sim-4", 1)]
    assert [[i.node for i in part] for part in chunks(taken, max_entries=10)] == [
        ["sim-1", "sim-2"],
        ["sim-3"],
        ["sim-4"],
    ]


def test_a_message_naming_another_groups_node_or_sent_for_another_group_is_refused_naming_the_field() -> None:
    check_group(NodeInventories(group="sim", inventories=[inventory("sim-001"), inventory("sim")]), "sim")
    forged = NodeInventories(group="sim", inventories=[inventory("sim-001"), inventory("sim2-001")])
    with pytest.raises(InvalidInput, match=r"inventories\[1\]\.node.*'sim2-001' is not of group 'sim'"):
        check_group(forged, "sim")
    with pytest.raises(InvalidInput, match=r"group.*'sim' sent on the subject of group 'sim2'"):
        check_group(NodeInventories(group="sim", inventories=[inventory("sim-001")]), "sim2")


def test_a_message_holds_at_least_one_and_at_most_a_thousand_nodes() -> None:
    with pytest.raises(ValueError, match="inventories"):
        NodeInventories(group="sim", inventories=[])
    with pytest.raises(ValueError, match="inventories"):
        NodeInventories(group="sim", inventories=[inventory(f"sim-{i}") for i in range(INVENTORIES_MAX + 1)])


def _grouped_agents(count: int) -> tuple[list[NodeAgent], group_inventories.InventoryBatch]:
    settings = load_settings(node_agent={"runtime": "sim", "sim_nodes": count, "node": "grp", "command_group": "grp"})
    agents = build_agents(settings, js=None)
    return agents, group_inventories.attach(agents, "grp")


class Recorder:
    """Stands in for `publish`: records (subject, message), failing from the `fail_from`-th call on."""

    def __init__(self, fail_from: int | None = None) -> None:
        self.sent: list[tuple[str, object]] = []
        self.fail_from = fail_from

    async def __call__(self, _js: object, subject: str, message: object, _envelope: object) -> None:
        if self.fail_from is not None and len(self.sent) >= self.fail_from:
            raise TimeoutError("no PubAck")
        self.sent.append((subject, message))


async def test_the_nodes_inventories_go_in_one_message_at_the_flush_not_one_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    recorder = Recorder()
    monkeypatch.setattr(group_inventories, "publish", recorder)
    agents, batch = _grouped_agents(3)
    for agent in agents:
        await agent.inventory_once()
    assert recorder.sent == []  # handed, not published
    assert all(agent.first_inventory_at is None for agent in agents)
    assert await batch.flush(js=None, source="test") == 3  # type: ignore[arg-type]
    ((subject, message),) = recorder.sent
    assert subject == "eru.inventories.grp"
    assert isinstance(message, NodeInventories)
    assert [i.node for i in message.inventories] == ["grp-001", "grp-002", "grp-003"]
    assert all(agent.inventories == 1 for agent in agents)
    assert all(agent.first_inventory_at is not None for agent in agents)
    assert all(agent.trail.windows == [] for agent in agents)
    assert await batch.flush(js=None, source="test") == 0  # type: ignore[arg-type]
    assert len(recorder.sent) == 1


async def test_a_container_a_command_touches_before_the_flush_is_reported_busy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The race rule (docs/operations.md): from the listing until the publication, whatever a command works on may be
    # listed out of date. The wait for the process's flush is part of that time.
    recorder = Recorder()
    monkeypatch.setattr(group_inventories, "publish", recorder)
    (agent,), batch = _grouped_agents(1)
    await agent.inventory_once()
    agent.trail.touched(["grp-001-c7"])  # a command starts on it after the listing
    await batch.flush(js=None, source="test")  # type: ignore[arg-type]
    ((_, message),) = recorder.sent
    assert isinstance(message, NodeInventories)
    assert message.inventories[0].busy == ["grp-001-c7"]


async def test_nodes_of_a_message_that_failed_are_not_taken_as_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder(fail_from=1)
    monkeypatch.setattr(group_inventories, "publish", recorder)
    monkeypatch.setattr(group_inventories, "chunks", lambda reports: ([r] for r in reports))  # a message each
    agents, batch = _grouped_agents(2)
    for agent in agents:
        await agent.inventory_once()
    assert await batch.flush(js=None, source="test") == 1  # type: ignore[arg-type]
    assert [agent.inventories for agent in agents] == [1, 0]
    assert agents[1].last_inventory is None  # its next periodic inventory goes out whatever it says
    assert all(agent.trail.windows == [] for agent in agents)
