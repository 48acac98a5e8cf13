"""Capacities that add up (docs/colocation.md "Reservations and batch capacity"): every `NodeCondition` the tracker
publishes is checked against the node it describes and its own other fields, over random sample sequences.

The issue's node registered 20.2 GB (80 % of MemTotal) and its condition offered batch 25.3 GB (all of MemTotal)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from eru.colocation.config import ColocationConfig
from eru.colocation.tracker import NodeTracker
from eru.domain import ContainerMetrics, NodeMetrics

GIB = 1024**3
CONFIG = ColocationConfig(
    window_seconds=30,
    metrics_interval_seconds=1,
    reservation_startup_seconds=5,
    reservation_half_life_seconds=5,
    reservation_peak_window_seconds=5,
    room_horizon_seconds=20,
    suppress_dwell_seconds=3,
)

container = st.tuples(
    st.sampled_from(["prod", "mid", "batch"]),
    st.floats(min_value=0, max_value=4, allow_nan=False),  # cpu used
    st.floats(min_value=0, max_value=4, allow_nan=False),  # cpu request
    st.integers(min_value=0, max_value=8 * GIB),  # memory used
    st.integers(min_value=0, max_value=8 * GIB),  # memory request
    st.sampled_from([0.0, 0.5, 2.0]),  # cpu limit
    st.sampled_from([0, 1, 2]),  # bound cores
)
step = st.tuples(
    st.lists(container, min_size=0, max_size=6),
    st.floats(min_value=0, max_value=1.2, allow_nan=False),  # extra node CPU (system, other processes)
)


def metrics(
    at: float, rows: list[tuple[str, float, float, int, int, float, int]], extra: float, shape: dict[str, float]
) -> NodeMetrics:
    cores, total, reg_cpu, reg_memory = shape["cores"], int(shape["memory"]), shape["reg_cpu"], int(shape["reg_memory"])
    containers = [
        ContainerMetrics(
            container_id=f"c{index}",
            priority_class=klass,  # type: ignore[arg-type]
            priority=index,
            tenant="t",
            cpu_used=used,
            memory_used=memory_used,
            cpu_request=request,
            memory_request=memory_request,
            cpu_limit=limit,
            cpu_cores=bound,
        )
        for index, (klass, used, request, memory_used, memory_request, limit, bound) in enumerate(rows)
    ]
    node_cpu = min(cores, sum(c.cpu_used for c in containers) + extra)
    node_memory = min(total, sum(c.memory_used for c in containers) + GIB)
    return NodeMetrics(
        node="n1",
        time=at,
        cpu_capacity=cores,
        cpu_used=node_cpu,
        memory_used=node_memory,
        memory_total=total,
        containers=containers,
        registered_cpu=reg_cpu,
        registered_memory=reg_memory,
    )


@settings(max_examples=120, deadline=None)
@given(
    st.sampled_from([2.0, 8.0, 32.0]),
    st.integers(min_value=4, max_value=64),
    st.floats(min_value=0.5, max_value=1.0),
    st.floats(min_value=0.5, max_value=1.0),
    st.lists(step, min_size=1, max_size=25),
)
def test_every_condition_adds_up(
    cores: float, memory_gib: int, cpu_share: float, memory_share: float, steps: list[tuple[list, float]]
) -> None:
    shape = {
        "cores": cores,
        "memory": memory_gib * GIB,
        "reg_cpu": round(cores * cpu_share, 2),
        "reg_memory": int(memory_gib * GIB * memory_share),  # e.g. memory_fraction 0.8 of MemTotal
    }
    tracker = NodeTracker("n1", CONFIG, condition_refresh_seconds=0)
    for index, (rows, extra) in enumerate(steps):
        at = 100.0 + index
        outcome = tracker.observe(metrics(at, rows, extra, shape), at)
        condition = outcome.condition
        if condition is None:
            continue
        # capacities: never below zero, never above what the node registered nor what it has
        assert 0 <= condition.batch_cpu_capacity <= min(shape["reg_cpu"], cores) + 1e-6
        assert 0 <= condition.batch_memory_capacity <= min(shape["reg_memory"], shape["memory"])
        if condition.room_cpu is not None:
            assert condition.batch_cpu_capacity <= condition.room_cpu + 1e-6
            assert 0 <= condition.room_cpu <= shape["reg_cpu"] + 1e-6
        # the allowance and the state agree with each other
        if condition.batch_cpu_allowed is not None:
            assert 0 <= condition.batch_cpu_allowed <= cores + 1e-6
        assert (condition.state == "evicting") == bool(condition.evicting)
        if condition.state == "suppressed":
            assert condition.batch_cpu_allowed is not None
        if condition.state == "forbid":
            assert condition.forbid_schedule_cpu or condition.forbid_schedule_memory
        if condition.state == "normal":
            assert condition.batch_cpu_allowed is None
            assert not condition.forbid_schedule_cpu
            assert not condition.forbid_schedule_memory
        assert 0 <= condition.cpu_percent <= 100 + 1e-6
        assert 0 <= condition.memory_percent <= 100 + 1e-6
        # the quotas behind the allowance never exceed a container's own limit
        for command in outcome.commands:
            if command.kind == "suppress" and command.cpu_quota is not None:
                row = rows[int(command.container_id[1:])]
                limit, bound = row[5], row[6]
                own = float(bound) if bound else limit if limit > 0 else cores
                assert command.cpu_quota <= min(own, cores) + 1e-6
