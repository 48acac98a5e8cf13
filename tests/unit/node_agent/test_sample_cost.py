"""What makes a sim node cheap per container must not change what it reports (docs/node-agent.md "Cost per
container"): the hand-written wire form of a sample, labels parsed once, results kept compactly and by age."""

from __future__ import annotations

import dataclasses

from eru.bus.codec import decode, encode, encode_value, to_wire
from eru.domain.messages import ContainerEvent, ContainerSpec, NodeMetrics, Workload
from eru.domain.resources import Allocation
from eru.nodeagent.engine import container_labels
from eru_node_agent.metrics import build_sample, sample_wire
from eru_node_agent.remembered import RememberedResults
from eru_node_agent.runtime.base import ContainerUsage, NodeUsage
from eru_node_agent.state import AgentState, FileStateStore, Known, MemoryStateStore


def _known(container_id: str, **workload: object) -> Known:
    spec = ContainerSpec(
        container_id=container_id,
        deploy_id=f"d-{container_id}",
        workload=Workload.model_validate({"name": "w", "image": "sim", **workload}),
        allocation=Allocation(cpu_limit=1.5, memory=64 * 2**20),
    )
    return Known(labels=container_labels(spec, "n1"), allocation=spec.allocation)


def _usage(*ids: str) -> NodeUsage:
    containers = {
        cid: ContainerUsage(0.1234567891 * (i + 1), 1000 * (i + 1), i, 0.0000011 * i) for i, cid in enumerate(ids)
    }
    return NodeUsage(
        cpu_used=sum(c.cpu_used for c in containers.values()),
        memory_used=sum(c.memory_used for c in containers.values()),
        memory_total=64 * 2**30,
        cpu_capacity=16.0,
        containers=containers,
    )


def test_the_wire_sample_is_what_the_validated_model_travels_as() -> None:
    known = {
        "a": _known("a"),
        "b": _known(
            "b",
            priority_class="batch",
            priority=7,
            tenant="t1",
            eviction_budget={"max_unavailable": "25%", "window_seconds": 600},
        ),
        "c": _known("c", priority_class="mid"),
        "unmeasured": _known("unmeasured"),
        "foreign": Known(labels={"app": "x"}, allocation=Allocation()),
    }
    usage = _usage("c", "a", "b", "foreign")
    wire = sample_wire("n1", 1234.5, usage, known, pod="p1")
    model = NodeMetrics.model_validate(wire)
    assert to_wire(model) == wire  # the same values, the same fields
    assert decode(encode_value(wire), NodeMetrics) == model  # what the eviction service reads
    assert [c.container_id for c in model.containers] == ["a", "b", "c"]
    assert model.containers[1].budget == {"max_unavailable": "25%", "window_seconds": 600}
    assert build_sample("n1", 1234.5, usage, known, pod="p1") == model


def test_labels_are_parsed_once_per_entry_and_again_after_a_change() -> None:
    known = _known("a", tenant="t2")
    first = known.managed
    assert first is not None
    assert first.tenant == "t2"
    assert known.managed is first
    assert known.sample_fields is known.sample_fields
    moved = dataclasses.replace(known, running=False)
    assert moved.managed is not first
    assert moved.managed == first
    assert Known(labels={}, allocation=Allocation()).sample_fields is None


def _event(command_id: str) -> ContainerEvent:
    return ContainerEvent(
        node="n1",
        container_id="a",
        kind="started",
        command_id=command_id,
        allocation=Allocation(cpu_map={"3": 50}, memory=2**20),
    )


def test_results_are_kept_as_bodies_for_the_redelivery_window_then_forgotten() -> None:
    now = [100.0]
    results = RememberedResults(max_count=5, keep_seconds=10.0, clock=lambda: now[0])
    results.remember("k1", _event("k1"))
    assert results["k1"] == _event("k1")
    assert results.get("missing") is None
    assert len(results.entries["k1"].body) < 400  # a body, not a model
    now[0] += 9.9
    results.remember("k2", _event("k2"))
    assert list(results) == ["k1", "k2"]  # k1 is still inside its window
    now[0] += 0.2
    results.remember("k3", _event("k3"))
    assert list(results) == ["k2", "k3"]  # k1 was remembered 10.1 s ago: it can no longer be redelivered
    for index in range(10):
        results.remember(f"m{index}", _event(f"m{index}"))
    assert list(results) == [f"m{index}" for index in range(5, 10)]  # and never more than the count


def test_results_survive_the_state_file_and_the_memory_store(tmp_path: object) -> None:
    from pathlib import Path

    state = AgentState()
    state.remember("k1", _event("k1"))
    store = FileStateStore(Path(str(tmp_path)) / "n1.json")
    store.save(state)
    assert store.load().commands["k1"] == _event("k1")
    # the older file form (results as JSON objects) still loads; a damaged body is dropped
    older = {"commands": [["k0", _event("k0").model_dump(mode="json")], ["bad", "bm90IG1zZ3BhY2s="]]}
    assert list(AgentState.from_json(older).commands) == ["k0"]
    memory = MemoryStateStore()
    memory.save(state)
    loaded = memory.load()
    assert decode(encode(loaded.commands["k1"]), ContainerEvent) == _event("k1")
