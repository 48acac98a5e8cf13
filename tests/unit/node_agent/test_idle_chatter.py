"""What nodes send while nothing happens (docs/node-agent.md "Idle cost"): a process's heartbeats cut into messages
(`chunks`), a group message only for the group's nodes (`check_group`), unknown nodes' beats counted with one summary
a minute (`UnknownBeats`), and an empty node's unchanged sample sent only at the floor (`worth_sending`)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from eru.domain.messages import (
    HEARTBEATS_MAX,
    ContainerEvent,
    ContainerSpec,
    Heartbeat,
    NodeCommand,
    NodeHeartbeats,
    Workload,
)
from eru.domain.resources import Allocation
from eru.envelope import Envelope
from eru.errors import InvalidInput
from eru.nodeagent.engine import L_CONTAINER
from eru.nodeagent.heartbeats import UnknownBeats, check_group, chunks, in_group
from eru.nodeagent.metrics import (
    INVENTORY_SETTLE_SECONDS,
    QUIET_INVENTORY_FLOOR_SECONDS,
    inventory_stale_after,
    quiet_floor,
    sample_news,
    worth_sending,
)
from eru.settings import load_settings
from eru_node_agent import agent as agent_module
from eru_node_agent import heartbeats, reports
from eru_node_agent.agent import NodeAgent
from eru_node_agent.app import build_agents
from eru_node_agent.config import RESULT_NAMESPACE
from eru_node_agent.state import Known


def beats(count: int, ids: int = 0) -> list[Heartbeat]:
    return [Heartbeat(node=f"sim-{i:03d}", containers=[f"c{i}-{j}" for j in range(ids)]) for i in range(count)]


def test_a_process_of_up_to_a_thousand_nodes_sends_one_message_in_order() -> None:
    sent = list(chunks(beats(HEARTBEATS_MAX)))
    assert len(sent) == 1
    assert [b.node for b in sent[0]] == [f"sim-{i:03d}" for i in range(HEARTBEATS_MAX)]


def test_more_nodes_than_a_message_holds_go_in_as_few_messages_as_fit() -> None:
    sent = list(chunks(beats(2500)))
    assert [len(part) for part in sent] == [1000, 1000, 500]
    assert [b.node for part in sent for b in part] == [b.node for b in beats(2500)]


def test_container_ids_cut_messages_too_and_a_node_with_more_goes_alone() -> None:
    sent = list(chunks(beats(5, ids=4), max_ids=10))
    assert [len(part) for part in sent] == [2, 2, 1]
    big = [Heartbeat(node="sim-1", containers=[f"c{j}" for j in range(30)]), *beats(2)]
    assert [len(part) for part in chunks(big, max_ids=10)] == [1, 2]
    assert list(chunks([])) == []


@pytest.mark.parametrize(
    ("node", "member"),
    [
        ("sim", True),
        ("sim-001", True),
        ("sim-12345", True),
        ("sim2-001", False),
        ("sim-", False),
        ("simx-1", False),
        ("sim-001-2", False),
        ("other-001", False),
    ],
)
def test_a_groups_nodes_are_its_name_or_its_name_and_a_number(node: str, member: bool) -> None:
    assert in_group("sim", node) is member


def test_a_group_message_naming_another_groups_node_is_refused_naming_the_field() -> None:
    check_group(NodeHeartbeats(group="sim", beats=beats(3)), "sim")
    forged = NodeHeartbeats(group="sim", beats=[*beats(2), Heartbeat(node="sim2-001")])
    with pytest.raises(InvalidInput, match=r"beats\[2\]\.node.*'sim2-001' is not of group 'sim'"):
        check_group(forged, "sim")


def test_a_group_message_for_another_group_than_its_subjects_is_refused() -> None:
    # a process may publish only on its own group's subject, but the message names its group itself: a process of
    # group "sim2" must not vouch for the nodes of "sim" by naming that group in a message on its own subject
    other = NodeHeartbeats(group="sim", beats=beats(2))
    with pytest.raises(InvalidInput, match=r"group.*'sim' sent on the subject of group 'sim2'"):
        check_group(other, "sim2")


def test_a_group_message_holds_at_most_a_thousand_nodes() -> None:
    with pytest.raises(ValueError, match="beats"):
        NodeHeartbeats(group="sim", beats=beats(HEARTBEATS_MAX + 1))


def test_unknown_beats_during_a_mass_registration_make_one_summary_a_minute_not_a_line_each() -> None:
    unknown = UnknownBeats(grace_seconds=30, summary_seconds=60)
    nodes = [f"sim-{i:04d}" for i in range(5000)]
    summaries = [unknown.seen(nodes[i : i + 500], set(), now=i / 500) for i in range(0, 5000, 500)]
    assert summaries == [None] * 10  # the storm of the first seconds: nothing logged yet
    # registered now: their beats are known, they are forgotten as unknown
    assert unknown.seen(nodes[:4990], set(nodes[:4990]), now=20) is None
    summary = unknown.seen(nodes[4990:], set(), now=61)
    assert summary is not None
    assert (summary.beats, summary.nodes, summary.lasting) == (5010, 5000, 10)
    assert summary.examples == tuple(nodes[4990:4995])
    assert unknown.seen(nodes[4990:], set(), now=62) is None  # the next one a minute later at the earliest
    again = unknown.seen(nodes[4990:], set(), now=121)
    assert again is not None
    assert (again.beats, again.nodes, again.lasting) == (20, 10, 10)


def test_known_beats_alone_never_make_a_summary() -> None:
    unknown = UnknownBeats(summary_seconds=60)
    assert all(unknown.seen(["a", "b"], {"a", "b"}, now=t) is None for t in range(0, 300, 5))


def test_the_unknown_nodes_remembered_are_bounded() -> None:
    unknown = UnknownBeats(limit=100)
    unknown.seen([f"x{i}" for i in range(250)], set(), now=0)
    assert len(unknown.first) <= 100
    assert len(unknown.nodes) <= 100
    assert unknown.beats == 250


def sample(time: float, cpu: float = 0.5, containers: dict[str, object] | None = None) -> dict[str, object]:
    return {"node": "sim-001", "time": time, "node_cpu_used": cpu, "containers": containers or {}}


def test_an_empty_nodes_unchanged_sample_goes_out_only_at_the_floor() -> None:
    first = sample_news(sample(0))
    assert worth_sending(first, False, None, now=0)
    last = (first, 0.0)
    assert sample_news(sample(5)) == first  # the time is no news
    assert not worth_sending(sample_news(sample(5)), False, last, now=5, floor_seconds=60)
    assert not worth_sending(sample_news(sample(59)), False, last, now=59.9, floor_seconds=60)
    assert worth_sending(sample_news(sample(60)), False, last, now=60, floor_seconds=60)


def test_nodes_floors_spread_over_half_the_base_so_nodes_registered_together_drift_apart() -> None:
    assert quiet_floor(60, 0.0) == 60
    assert quiet_floor(60, 0.5) == 75
    assert quiet_floor(60, 0.999) < 90
    assert quiet_floor(60, 7) == 90  # a fraction out of range is clamped
    floors = {quiet_floor(60, i / 10) for i in range(10)}
    assert len(floors) == 10  # ten nodes, ten periods: their floor samples do not stay together


def test_a_changed_sample_or_a_node_with_containers_always_goes_out() -> None:
    last = (sample_news(sample(0)), 0.0)
    assert worth_sending(sample_news(sample(5, cpu=0.6)), False, last, now=5)
    assert worth_sending(sample_news(sample(5)), True, last, now=5)


def test_a_quiet_nodes_newest_inventory_is_warned_about_only_after_its_floor() -> None:
    assert inventory_stale_after(30) == 1.5 * QUIET_INVENTORY_FLOOR_SECONDS + 30  # the longest floor and a period
    assert inventory_stale_after(600) == 1800


def _sim_agents(count: int) -> list[NodeAgent]:
    settings = load_settings(node_agent={"runtime": "sim", "sim_nodes": count, "node": "grp", "command_group": "grp"})
    return build_agents(settings, js=None)


def _recording(monkeypatch: pytest.MonkeyPatch, module: object) -> list[tuple[str, object]]:
    sent: list[tuple[str, object]] = []

    async def publish(_js: object, subject: str, message: object, _envelope: object) -> None:
        sent.append((subject, message))

    monkeypatch.setattr(module, "publish", publish)
    return sent


async def test_a_grouped_process_publishes_its_started_nodes_beats_as_one_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = _recording(monkeypatch, heartbeats)
    agents = _sim_agents(4)
    for agent in agents[:3]:
        agent.started.set()  # grp-004 has not registered yet: not in the beat
    assert await heartbeats.group_heartbeat_once(agents, "grp") == 3
    assert len(sent) == 1
    subject, message = sent[0]
    assert subject == "eru.heartbeats.grp"
    assert isinstance(message, NodeHeartbeats)
    assert [beat.node for beat in message.beats] == ["grp-001", "grp-002", "grp-003"]


async def test_an_empty_nodes_periodic_inventory_that_says_nothing_new_waits_for_its_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent = _recording(monkeypatch, reports)
    (agent,) = _sim_agents(1)
    await agent.inventory_once()  # at start: always
    await agent.inventory_once(periodic=True)  # settling: the ledger may hold a previous run's containers
    assert (len(sent), agent.inventories_skipped) == (2, 0)
    assert agent.first_inventory_at is not None
    agent.first_inventory_at -= max(INVENTORY_SETTLE_SECONDS, 2 * agent.config.inventory_interval_seconds) + 1
    await agent.inventory_once(periodic=True)  # nothing new: skipped
    assert (len(sent), agent.inventories_skipped) == (2, 1)
    await agent.inventory_once()  # not periodic (a start, a rebuild): always
    assert len(sent) == 3
    assert agent.last_inventory is not None
    news, taken_at = agent.last_inventory
    agent.last_inventory = (news, taken_at - quiet_floor(QUIET_INVENTORY_FLOOR_SECONDS, 1.0))  # its floor passed
    await agent.inventory_once(periodic=True)
    assert len(sent) == 4
    monkeypatch.setattr(agent.locks, "held", lambda: {"c1"})  # a command works on a container: that is news
    await agent.inventory_once(periodic=True)
    assert len(sent) == 5


async def test_a_heartbeat_round_that_finds_nothing_makes_no_envelope(monkeypatch: pytest.MonkeyPatch) -> None:
    # a sim process reconciles every node at every beat (1,000 a second at 5,000 nodes); the reconcile's envelope
    # is made only for an event it reports (docs/performance.md "Where the sim agents' time goes at 5,000 nodes")
    made: list[str] = []
    real = reports.new_envelope

    def counting(kind: str, source: str, *args: Any, **kwargs: Any) -> Any:
        made.append(kind)
        return real(kind, source, *args, **kwargs)

    monkeypatch.setattr(reports, "new_envelope", counting)
    _recording(monkeypatch, heartbeats)
    agents = _sim_agents(3)
    for agent in agents:
        agent.started.set()
    assert await heartbeats.group_heartbeat_once(agents, "grp") == 3
    assert made == []


async def test_what_a_reconcile_reports_still_names_one_reconciled_cause(monkeypatch: pytest.MonkeyPatch) -> None:
    emitted: list[tuple[ContainerEvent, Envelope]] = []
    (agent,) = _sim_agents(1)

    async def emit(event: ContainerEvent, cause: Envelope, message_id: str | None = None) -> None:
        emitted.append((event, cause))

    monkeypatch.setattr(agent, "emit", emit)
    for name in ("c1", "c2"):  # the agent knows them; the engine never ran them: both vanished
        agent.state.containers[name] = Known(labels={L_CONTAINER: name}, allocation=Allocation())
    await agent.reconcile()
    assert sorted((event.container_id, event.kind) for event, _ in emitted) == [("c1", "removed"), ("c2", "removed")]
    causes = {cause.id for _, cause in emitted}
    assert len(causes) == 1
    assert all(cause.type == "eru.node.reconciled" for _, cause in emitted)


def test_a_nodes_place_in_its_intervals_is_its_names_and_computed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = _sim_agents(2)
    expected = (uuid.uuid5(RESULT_NAMESPACE, "grp-001").int % 1000) / 1000
    assert first.report_offset(25.0) == pytest.approx(expected * 25.0)
    assert first.report_offset(1.0) != second.report_offset(1.0)
    calls: list[str] = []
    real = uuid.uuid5

    def counting(namespace: uuid.UUID, name: str) -> uuid.UUID:
        calls.append(name)
        return real(namespace, name)

    monkeypatch.setattr(uuid, "uuid5", counting)
    for _ in range(3):
        first.report_offset(25.0)
    assert calls == []
    assert (first.metrics_subject, first.inventory_subject) == ("eru.metrics.grp-001", "eru.node.grp-001.inventory")


async def _loaded_agent(monkeypatch: pytest.MonkeyPatch, containers: int) -> tuple[NodeAgent, list[str]]:
    """A started sim node running `containers` containers; the subjects it publishes on are recorded."""
    sent: list[str] = []

    async def publish(_js: object, subject: str, *_args: object, **_kwargs: object) -> None:
        sent.append(subject)

    for module, name in ((agent_module, "publish"), (reports, "publish"), (reports, "publish_value")):
        monkeypatch.setattr(module, name, publish)
    (agent,) = _sim_agents(1)
    await agent.start()
    assert agent.executor is not None
    for index in range(containers):
        cid = f"c{index}"
        spec = ContainerSpec(
            container_id=cid, deploy_id="d1", workload=Workload(name="w", image="sim"), allocation=Allocation(memory=1)
        )
        command = NodeCommand(command_id=f"k{index}", node=agent.node, kind="create", container_id=cid, spec=spec)
        await agent.executor.execute(command)
    sent.clear()
    return agent, sent


async def test_a_loaded_nodes_reports_go_out_without_spelling_out_their_news(monkeypatch: pytest.MonkeyPatch) -> None:
    # the repr of every listed container, per loaded node and report, is what an always-sent report needs least
    agent, sent = await _loaded_agent(monkeypatch, 3)
    spelled: list[object] = []
    real = reports.sample_news

    def counting(sample: Any) -> Any:
        spelled.append(sample)
        return real(sample)

    monkeypatch.setattr(reports, "sample_news", counting)
    await agent.metrics_once(1.0)
    await agent.metrics_once(1.0)
    await agent.inventory_once(periodic=True)
    assert sent == ["eru.metrics.grp", "eru.metrics.grp", "eru.node.grp.inventory"]
    assert spelled == []


async def test_a_node_emptied_sends_its_first_empty_reports_then_waits_for_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent, sent = await _loaded_agent(monkeypatch, 2)
    for _ in range(2):
        await agent.metrics_once(1.0)
    agent.first_inventory_at = 0.0  # settled
    await agent.inventory_once(periodic=True)
    agent.state.containers.clear()  # its containers are gone (the runtime's too, below)
    agent.runtime.containers.clear()  # type: ignore[attr-defined]
    for _ in range(3):
        await agent.metrics_once(1.0)
        await agent.inventory_once(periodic=True)
    metrics, inventories = sent.count("eru.metrics.grp"), sent.count("eru.node.grp.inventory")
    assert (metrics, inventories) == (3, 2)  # 2 loaded + the first empty; 1 loaded + the first empty
    assert (agent.samples_skipped, agent.inventories_skipped) == (2, 2)
