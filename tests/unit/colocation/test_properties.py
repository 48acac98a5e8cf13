"""Properties of the eviction decision over random nodes (hypothesis): only batch goes, in priority order, enough."""

from __future__ import annotations

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from eru.colocation.plan_kind import solve_evict

GIB = 1024**3

container = st.fixed_dictionaries(
    {
        "class": st.sampled_from(["prod", "mid", "batch"]),
        "priority": st.integers(min_value=0, max_value=3),
        "cpu_request": st.integers(min_value=0, max_value=8),
        "memory_request": st.integers(min_value=0, max_value=8).map(lambda g: g * GIB),
        "cpu_used": st.floats(min_value=0, max_value=8, allow_nan=False),
        "memory_used": st.integers(min_value=0, max_value=8).map(lambda g: g * GIB),
    }
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(container, min_size=1, max_size=10),
    st.floats(min_value=0, max_value=32, allow_nan=False),
    st.integers(min_value=0, max_value=64).map(lambda g: g * GIB),
    st.one_of(st.none(), st.floats(min_value=0, max_value=16, allow_nan=False)),
    st.integers(min_value=1, max_value=40),
    st.one_of(st.none(), st.floats(min_value=0.85, max_value=1.0)),
)
def test_victims_are_batch_in_priority_order_and_free_enough(
    items: list[dict[str, Any]],
    node_cpu: float,
    node_memory: int,
    allowed: float | None,
    count: int,
    squeeze: float | None,
) -> None:
    if squeeze is not None:
        # A pressured node: busy, batch using nearly all it is allowed.
        node_cpu = max(node_cpu, 24.0)
        allowed = allowed if allowed is not None else 2.0
        batch = [item for item in items if item["class"] == "batch"]
        for item in batch:
            item["cpu_used"] = allowed * squeeze / len(batch)
    containers = [
        {k: item[k] for k in ("class", "priority", "cpu_request", "memory_request")} | {"id": f"c{i}"}
        for i, item in enumerate(items)
    ]
    usage = {
        f"c{i}": {"cpu_used": item["cpu_used"], "memory_used": item["memory_used"]} for i, item in enumerate(items)
    }
    samples = [
        {
            "time": 1000.0 - 5 * k,
            "node_cpu_used": node_cpu,
            "node_memory_used": node_memory,
            "batch_cpu_allowed": allowed,
            "containers": usage,
        }
        for k in range(count)
    ]
    problem = {
        "node": {"name": "n", "cpu": 32, "memory": 64 * GIB},
        "now": 1000.0,
        "containers": containers,
        "samples": list(reversed(samples)),
    }
    answer = solve_evict(problem)
    by_id = {c["id"]: c for c in containers}
    victims = answer["evict"]
    event(f"victims: {sorted({v['reason'] for v in victims})}")
    assert all(by_id[v["id"]]["class"] == "batch" for v in victims)
    assert len({v["id"] for v in victims}) == len(victims)
    for reason in ("memory", "cpu-satisfaction"):
        chosen = [by_id[v["id"]]["priority"] for v in victims if v["reason"] == reason]
        assert chosen == sorted(chosen)  # lowest priority first
    cpu = answer["explain"]["cpu"]
    if any(v["reason"] == "cpu-satisfaction" for v in victims):
        assert all(cpu["conditions"].values())
        batch_total = sum(c["cpu_request"] for c in containers if c["class"] == "batch")
        freed = sum(v["release"] for v in victims if v["reason"] == "cpu-satisfaction")
        memory_freed = sum(by_id[v["id"]]["cpu_request"] for v in victims if v["reason"] == "memory")
        assert freed + memory_freed >= min(cpu["release_cores"], batch_total) - 1e-6
    assert solve_evict(problem) == answer  # deterministic
