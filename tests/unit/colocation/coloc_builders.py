"""Problem builders for the colocation unit tests (docs/planning.md `evict` JSON)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

GIB = 1024**3
NOW = 1000.0

CONFIG: dict[str, Any] = {
    "cpu_forbid": 65,
    "cpu_suppress": 65,
    "cpu_evict": 75,
    "memory_forbid": 65,
    "memory_evict": 70,
    "satisfaction_lower": 60,
    "satisfaction_upper": 80,
    "batch_util_threshold": 90,
    "window_seconds": 300,
    "cpu_cooldown_seconds": 20,
    "memory_cooldown_seconds": 4,
    "metrics_interval_seconds": 5,
}

# b1, b2 at priority 1, b3 at priority 2: 10 cores of batch request; one prod and one mid container.
CONTAINERS: list[dict[str, Any]] = [
    {"id": "p1", "class": "prod", "priority": 0, "cpu_request": 8, "memory_request": 8 * GIB},
    {"id": "m1", "class": "mid", "priority": 0, "cpu_request": 4, "memory_request": 4 * GIB},
    {"id": "b1", "class": "batch", "priority": 1, "cpu_request": 4, "memory_request": 4 * GIB},
    {"id": "b2", "class": "batch", "priority": 1, "cpu_request": 2, "memory_request": 2 * GIB},
    {"id": "b3", "class": "batch", "priority": 2, "cpu_request": 4, "memory_request": 4 * GIB},
]


def sample(
    time: float,
    *,
    node_cpu: float = 25.0,
    node_memory: int = 30 * GIB,
    allowed: float | None = 4.0,
    batch: tuple[float, float, float] = (1.5, 0.8, 1.5),
    batch_memory: tuple[int, int, int] = (3 * GIB, 1 * GIB, 2 * GIB),
) -> dict[str, Any]:
    """One sample: prod uses 10 cores, mid 4 (+ system), batch b1/b2/b3 as given (default 3.8 cores of 10 requested)."""
    return {
        "time": time,
        "node_cpu_used": node_cpu,
        "node_memory_used": node_memory,
        "batch_cpu_allowed": allowed,
        "containers": {
            "p1": {"cpu_used": 10.0, "memory_used": 8 * GIB},
            "m1": {"cpu_used": 4.0, "memory_used": 4 * GIB},
            "b1": {"cpu_used": batch[0], "memory_used": batch_memory[0]},
            "b2": {"cpu_used": batch[1], "memory_used": batch_memory[1]},
            "b3": {"cpu_used": batch[2], "memory_used": batch_memory[2]},
        },
    }


def problem(
    count: int = 60,
    *,
    newest: Callable[[float], dict[str, Any]] | None = None,
    every: Callable[[float], dict[str, Any]] | None = None,
    now: float = NOW,
    newest_age: float = 0.0,
    **overrides: Any,
) -> dict[str, Any]:
    """A node under pressure: `count` samples 5 s apart ending `newest_age` before `now`, all conditions true."""
    make = every or (lambda t: sample(t))
    last = now - newest_age
    times = [last - 5.0 * i for i in range(count - 1, -1, -1)]
    samples = [make(t) for t in times[:-1]] + ([(newest or make)(times[-1])] if times else [])
    base: dict[str, Any] = {
        "kind": "evict",
        "config": dict(CONFIG),
        "node": {"name": "n1", "cpu": 32, "memory": 64 * GIB},
        "now": now,
        "last_cpu_eviction": None,
        "last_memory_eviction": None,
        "containers": copy.deepcopy(CONTAINERS),
        "samples": samples,
    }
    base.update(overrides)
    return base
