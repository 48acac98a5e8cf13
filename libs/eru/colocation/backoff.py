"""Memory of evictions (docs/colocation.md "Memory of evictions", "Batch workloads keep their count"), pure.

Two back-offs, both functions of a recorded eviction history and a given `now`:

* **node back-off** — after an instance of workload W is evicted from node N, N is avoided for W's placements for
  `avoid_seconds` (600); each further eviction of W from N within `avoid_decay_seconds` (3600) doubles it (capped at
  `avoid_max_seconds`), and evictions older than the decay no longer count, so the back-off decays back to the base;
* **re-placement back-off** — an evicted instance of a kept workload is placed again after
  `replace_base_seconds × 2^k` (k = its evictions within `replace_window_seconds`, capped at
  `replace_max_delay_seconds`); after `max_evictions` evictions in all, eru gives up on it (an event says so).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from eru.errors import InvalidInput


@dataclass(frozen=True, slots=True)
class KeepConfig:
    """The back-off settings (seconds; `max_evictions` a count, 0 = never give up)."""

    avoid_seconds: float = 600.0
    avoid_max_seconds: float = 3600.0
    avoid_decay_seconds: float = 3600.0
    replace_base_seconds: float = 30.0
    replace_max_delay_seconds: float = 900.0
    replace_window_seconds: float = 3600.0
    max_evictions: int = 10

    def to_dict(self) -> dict[str, Any]:
        """Every field, as recorded with a decision."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


KEEP_FIELDS = frozenset(f.name for f in fields(KeepConfig))


def parse_keep_config(raw: Mapping[str, Any] | None, field: str = "keep") -> KeepConfig:
    """A `KeepConfig` over the defaults; unknown keys and bad values are `InvalidInput` naming `<field>.<key>`."""
    if raw is None:
        return KeepConfig()
    if not isinstance(raw, Mapping):
        raise InvalidInput(field, f"expected an object, got {type(raw).__name__}")
    values: dict[str, Any] = {}
    for key, value in raw.items():
        name = f"{field}.{key}"
        if key not in KEEP_FIELDS:
            raise InvalidInput(name, f"unknown setting (known: {', '.join(sorted(KEEP_FIELDS))})")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise InvalidInput(name, f"expected a finite number ≥ 0, got {value!r}")
        if key == "max_evictions":
            if not isinstance(value, int):
                raise InvalidInput(name, f"expected an integer count, got {value!r}")
            values[key] = value
        else:
            values[key] = float(value)
    config = KeepConfig(**values)
    if config.avoid_max_seconds < config.avoid_seconds:
        raise InvalidInput(f"{field}.avoid_max_seconds", "must be at least avoid_seconds")
    if config.replace_max_delay_seconds < config.replace_base_seconds:
        raise InvalidInput(f"{field}.replace_max_delay_seconds", "must be at least replace_base_seconds")
    return config


@dataclass(frozen=True, slots=True)
class Eviction:
    """One recorded eviction: which workload, which instance (its lineage: the first instance's id), node, time."""

    workload: str
    instance: str
    node: str
    time: float

    def to_dict(self) -> dict[str, Any]:
        """JSON form, as recorded in a placement's input."""
        return {"workload": self.workload, "instance": self.instance, "node": self.node, "time": self.time}


def eviction_from_dict(raw: object, field: str) -> Eviction:
    """An `Eviction` from its JSON form; `InvalidInput` naming the field."""
    if not isinstance(raw, Mapping):
        raise InvalidInput(field, f"expected an object, got {type(raw).__name__}")
    texts = {}
    for key in ("workload", "instance", "node"):
        value = raw.get(key, "")
        if not isinstance(value, str):
            raise InvalidInput(f"{field}.{key}", f"expected a string, got {value!r}")
        texts[key] = value
    time = raw.get("time")
    if isinstance(time, bool) or not isinstance(time, int | float) or not math.isfinite(time):
        raise InvalidInput(f"{field}.time", f"expected a time in seconds, got {time!r}")
    return Eviction(texts["workload"], texts["instance"], texts["node"], float(time))


@dataclass(frozen=True, slots=True)
class Avoidance:
    """Why a node is avoided for a workload's placements right now."""

    node: str
    workload: str
    last: float
    backoff: float
    evictions: int
    now: float

    @property
    def until(self) -> float:
        """When the node may take the workload again."""
        return self.last + self.backoff

    def explain(self) -> str:
        """`evicted web-batch 4 min ago, back-off 10 min` (rounded to minutes, seconds under a minute)."""
        return f"evicted {self.workload} {_span(self.now - self.last)} ago, back-off {_span(self.backoff)}"


def _span(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min"


def node_backoff(count: int, config: KeepConfig) -> float:
    """The back-off after `count` (≥ 1) evictions of a workload from one node within the decay."""
    return float(min(config.avoid_max_seconds, config.avoid_seconds * 2 ** max(0, count - 1)))


def avoided_nodes(history: Iterable[Eviction], workload: str, now: float, config: KeepConfig) -> dict[str, Avoidance]:
    """The nodes `workload` must not be placed on at `now`, each with its reason; a pure function of the history."""
    start = now - config.avoid_decay_seconds
    per_node: dict[str, list[float]] = {}
    for eviction in history:
        if eviction.workload == workload and start < eviction.time <= now:
            per_node.setdefault(eviction.node, []).append(eviction.time)
    avoided = {}
    for node, times in sorted(per_node.items()):
        last = max(times)
        backoff = node_backoff(len(times), config)
        if now - last < backoff:
            avoided[node] = Avoidance(node, workload, last, backoff, len(times), now)
    return avoided


def replacement_delay(times: Sequence[float], now: float, config: KeepConfig) -> float:
    """Seconds to wait before placing again an instance evicted at `times`: base × 2^k, k its evictions within the
    window (the one that just happened included), capped."""
    k = sum(1 for t in times if now - config.replace_window_seconds < t <= now)
    return float(min(config.replace_max_delay_seconds, config.replace_base_seconds * 2**k))


def gives_up(times: Sequence[float], config: KeepConfig) -> bool:
    """Whether an instance evicted at `times` has reached the maximum: eru stops re-placing it."""
    return config.max_evictions > 0 and len(times) >= config.max_evictions
