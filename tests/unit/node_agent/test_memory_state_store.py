"""The memory state store saves incrementally but must behave like a full copy at each save."""

from __future__ import annotations

import dataclasses

from eru.domain.messages import ContainerEvent, ContainerSpec, Workload
from eru.domain.resources import Allocation
from eru.nodeagent.engine import container_labels
from eru_node_agent import state as state_module
from eru_node_agent.state import AgentState, Known, MemoryStateStore


def _event(command_id: str, kind: str = "started") -> ContainerEvent:
    return ContainerEvent(node="n1", container_id="a", kind=kind, command_id=command_id)


def _known(memory: int = 1) -> Known:
    spec = ContainerSpec(
        container_id="a", deploy_id="d", workload=Workload(name="w", image="busybox"), allocation=Allocation()
    )
    return Known(labels=container_labels(spec, "n1"), allocation=Allocation(memory=memory))


def test_a_load_sees_what_was_saved_and_nothing_changed_after() -> None:
    store = MemoryStateStore()
    state = AgentState()
    state.containers["a"] = _known()
    state.remember("k1", _event("k1"))
    store.save(state)
    # changes after the save: a new command, a changed and a new container, a removed one
    state.remember("k2", _event("k2"))
    state.containers["a"] = dataclasses.replace(state.containers["a"], running=False)
    state.containers["b"] = _known(2)
    loaded = store.load()
    assert list(loaded.commands) == ["k1"]
    assert set(loaded.containers) == {"a"}
    assert loaded.containers["a"].running
    store.save(state)
    del state.containers["a"]
    loaded = store.load()
    assert list(loaded.commands) == ["k1", "k2"]
    assert not loaded.containers["a"].running
    assert loaded.containers["b"].allocation.memory == 2
    # the loading agent's own changes do not reach the store until it saves
    loaded.remember("k3", _event("k3"))
    loaded.containers.clear()
    assert list(store.load().commands) == ["k1", "k2"]
    assert set(store.load().containers) == {"a", "b"}


def test_a_repeated_command_with_a_new_result_is_saved_and_the_memory_stays_bounded() -> None:
    store = MemoryStateStore()
    state = AgentState()
    state.remember("k1", _event("k1"))
    state.remember("k2", _event("k2"))
    store.save(state)
    state.remember("k1", _event("k1", "failed"))  # moved to the end with another result
    store.save(state)
    loaded = store.load()
    assert list(loaded.commands) == ["k2", "k1"]
    assert loaded.commands["k1"].kind == "failed"
    for index in range(state_module.MAX_REMEMBERED_COMMANDS + 3):
        state.remember(f"m{index}", _event(f"m{index}"))
        if index % 1000 == 0:
            store.save(state)
    store.save(state)
    loaded = store.load()
    assert len(loaded.commands) == state_module.MAX_REMEMBERED_COMMANDS
    assert list(loaded.commands) == list(state.commands)


def test_result_ids_are_the_uuid5_of_node_and_command() -> None:
    import uuid

    from eru_node_agent.config import RESULT_NAMESPACE, result_id

    for node, command_id in (("sim-001", "0192f0c2-aaaa"), ("n", "x"), ("nœud", "ü")):
        assert result_id(node, command_id) == str(uuid.uuid5(RESULT_NAMESPACE, f"{node}/{command_id}"))
