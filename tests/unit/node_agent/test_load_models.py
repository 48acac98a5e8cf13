"""Load models of the simulated runtime: each model, determinism under a seed, limits, bad input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eru.domain.resources import ResourceRequest
from eru.errors import InvalidInput
from eru.nodeagent.load import (
    LOAD_LABEL,
    ConstantLoad,
    NoisyLoad,
    StepLoad,
    TraceLoad,
    Usage,
    apply_limits,
    load_for,
    parse_load,
    share_node_cpu,
    usage_at,
)

MiB = 1024**2


def test_constant_and_default_load() -> None:
    model = load_for({}, ResourceRequest(cpu_request=1.5, memory_request=256 * MiB))
    assert model == ConstantLoad(cpu=1.5, memory=256 * MiB)
    assert usage_at(model, 1000.0, seed=1, container_id="c") == Usage(1.5, 256 * MiB)
    assert usage_at(model, -1.0, seed=1, container_id="c") == Usage(0.0, 0)


def test_step_load_from_a_label() -> None:
    text = '{"kind": "step", "steps": [{"at": 0, "cpu": 0.2, "memory": "64MiB"}, {"at": 30, "cpu": 1.5}]}'
    model = load_for({LOAD_LABEL: text}, ResourceRequest())
    assert isinstance(model, StepLoad)
    assert usage_at(model, 29.9, seed=0, container_id="c") == Usage(0.2, 64 * MiB)
    assert usage_at(model, 30.0, seed=0, container_id="c") == Usage(1.5, 0)


def test_trace_loops_or_holds() -> None:
    looping = TraceLoad(interval_seconds=2, cpu=[0.1, 0.2, 0.3], memory=[1, 2, 3])
    assert [usage_at(looping, t, seed=0, container_id="c").cpu for t in (0, 2, 4, 6, 7.9)] == [0.1, 0.2, 0.3, 0.1, 0.1]
    holding = TraceLoad(interval_seconds=2, cpu=[0.1, 0.2], loop=False)
    assert usage_at(holding, 100, seed=0, container_id="c") == Usage(0.2, 0)


@settings(max_examples=50)
@given(seed=st.integers(0, 2**31), elapsed=st.floats(0, 10_000), cid=st.text(min_size=1, max_size=12))
def test_noise_is_deterministic_and_bounded(seed: int, elapsed: float, cid: str) -> None:
    model = NoisyLoad(cpu=1.0, memory=100 * MiB, cpu_noise=0.5, memory_noise=10 * MiB, period_seconds=5)
    first = usage_at(model, elapsed, seed=seed, container_id=cid)
    assert first == usage_at(model, elapsed, seed=seed, container_id=cid)
    assert 0.5 <= first.cpu <= 1.5
    assert 90 * MiB <= first.memory <= 110 * MiB
    # within one period the value holds
    slot_start = (elapsed // 5) * 5
    assert usage_at(model, slot_start, seed=seed, container_id=cid) == first


def test_different_seeds_give_different_noise() -> None:
    model = NoisyLoad(cpu=1.0, cpu_noise=0.5)
    series = {seed: [usage_at(model, t, seed=seed, container_id="c").cpu for t in range(20)] for seed in (1, 2)}
    assert series[1] != series[2]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"kind": "step", "steps": []}', "workload.labels.eru.sim.load.step.steps"),
        ('{"kind": "wave"}', "workload.labels.eru.sim.load"),
        ('{"kind": "constant", "cpu": -1}', "workload.labels.eru.sim.load.constant.cpu"),
        ('{"kind": "trace", "cpu": [1, 2], "memory": [1]}', "workload.labels.eru.sim.load.trace"),
        ("not json", "workload.labels.eru.sim.load"),
    ],
)
def test_bad_load_models_name_the_field(text: str, field: str) -> None:
    with pytest.raises(InvalidInput) as error:
        parse_load(text)
    assert error.value.field == field


def test_steps_must_ascend() -> None:
    with pytest.raises(InvalidInput) as error:
        parse_load('{"kind": "step", "steps": [{"at": 5, "cpu": 1}, {"at": 1, "cpu": 2}]}')
    assert "ascending" in error.value.reason


def test_limits_cap_usage_and_report_throttling() -> None:
    limited = apply_limits(Usage(2.0, 300 * MiB), cpu_cap=0.5, memory_cap=256 * MiB, interval_seconds=5)
    assert (limited.cpu, limited.memory) == (0.5, 256 * MiB)
    assert limited.throttled_periods == 50
    assert limited.throttled_seconds == pytest.approx(5 * 1.5 / 2.0)
    free = apply_limits(Usage(2.0, 300 * MiB), cpu_cap=0, memory_cap=0, interval_seconds=5)
    assert (free.cpu, free.memory, free.throttled_periods) == (2.0, 300 * MiB, 0)


def test_an_overloaded_node_shares_its_cores_in_proportion() -> None:
    assert share_node_cpu({"a": 3.0, "b": 1.0}, 2.0) == {"a": 1.5, "b": 0.5}
    assert share_node_cpu({"a": 1.0}, 2.0) == {"a": 1.0}
