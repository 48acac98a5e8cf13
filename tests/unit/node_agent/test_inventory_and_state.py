"""Rebuild classification (present / vanished / foreign), the agent's saved state, command-line options."""

from __future__ import annotations

from pathlib import Path

from eru.domain.messages import ContainerEvent, ContainerSpec, Workload
from eru.domain.resources import Allocation
from eru.nodeagent.engine import container_labels
from eru.nodeagent.inventory import classify
from eru_node_agent.__main__ import parse_overrides
from eru_node_agent.app import sim_node_names
from eru_node_agent.state import AgentState, FileStateStore, Known, MemoryStateStore


def labels_for(container_id: str, node: str) -> dict[str, str]:
    spec = ContainerSpec(
        container_id=container_id,
        deploy_id="d",
        workload=Workload(name="w", image="i"),
        allocation=Allocation(memory=1),
    )
    return container_labels(spec, node)


def test_classify_sorts_present_vanished_and_foreign() -> None:
    engine = [
        ("e1", "eru-a", labels_for("a", "n1"), "running"),
        ("e2", "eru-b", labels_for("b", "n2"), "running"),
        ("e3", "postgres", {"com.example": "x"}, "exited"),
    ]
    inventory = classify("n1", engine, remembered={"a", "gone"})
    assert list(inventory.present) == ["a"]
    assert inventory.present["a"][1] == "running"
    assert inventory.vanished == ["gone"]
    assert [(f.container_id, "n2" in f.reason) for f in inventory.foreign] == [("b", True), ("postgres", False)]


def test_state_round_trips_and_forgets_the_oldest_commands(tmp_path: Path) -> None:
    state = AgentState()
    state.containers["a"] = Known(labels=labels_for("a", "n1"), allocation=Allocation(cpu_map={"0": 50}))
    event = ContainerEvent(node="n1", container_id="a", kind="started", command_id="k1")
    state.remember("k1", event)
    store = FileStateStore(tmp_path / "x" / "n1.json")
    store.save(state)
    loaded = store.load()
    assert loaded.containers["a"].allocation == Allocation(cpu_map={"0": 50})
    assert loaded.commands["k1"] == event
    assert FileStateStore(tmp_path / "missing.json").load().containers == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert FileStateStore(tmp_path / "bad.json").load().commands == {}
    memory = MemoryStateStore()
    memory.save(state)
    assert memory.load().containers.keys() == {"a"}

    from eru_node_agent import state as state_module

    bounded = AgentState()
    for index in range(state_module.MAX_REMEMBERED_COMMANDS + 5):
        bounded.remember(f"k{index}", event)
    assert len(bounded.commands) == state_module.MAX_REMEMBERED_COMMANDS
    assert "k0" not in bounded.commands


def test_command_line_and_sim_node_names() -> None:
    assert parse_overrides(["--sim", "--nodes", "200"]) == {"node_agent": {"runtime": "sim", "sim_nodes": 200}}
    assert parse_overrides([]) == {}
    assert parse_overrides(["--node", "n7", "--metrics-interval", "1"]) == {
        "node_agent": {"node": "n7", "metrics_interval_seconds": 1.0}
    }
    assert sim_node_names("sim", 1) == ["sim"]
    assert sim_node_names("sim", 3) == ["sim-001", "sim-002", "sim-003"]
    assert sim_node_names("s", 1200)[-1] == "s-1200"
