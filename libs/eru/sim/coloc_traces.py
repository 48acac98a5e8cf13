"""Latency-sensitive load traces for `eru sim colocation` (pure): each node's prod CPU as a share of its capacity.

* `sine` — each node its own mean, amplitude and phase (nodes peak at different times);
* `sync` — the same, but every node in phase (the whole pod peaks together);
* `step` — a square wave: low for half the period, high for the other half, per-node phase;
* `recorded` — a JSON file `{"interval_seconds": 60, "nodes": [[0.41, 0.44, …], …]}` (one series per node, shares of
  the node's CPU, looped; fewer series than nodes are reused in turn).

`cool_nodes` of the nodes keep a low load (mean `cool_mean`, half the amplitude): a pod where some nodes have room at
their peak. Means and amplitudes come from a seeded generator, so a seed gives the same pod every time.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from eru.bounded import clip
from eru.errors import InvalidInput

KINDS = ("sine", "sync", "step", "recorded")


@dataclass(frozen=True, slots=True)
class NodeTrace:
    """One node's latency-sensitive CPU share over time."""

    kind: str
    mean: float
    amplitude: float
    period: float
    phase: float
    series: tuple[float, ...] = ()
    interval: float = 60.0

    def at(self, t: float) -> float:
        """The share of the node's CPU the latency-sensitive containers want at `t` (0..1)."""
        if self.kind == "recorded":
            index = math.floor(t / self.interval) % len(self.series)
            return min(1.0, max(0.0, self.series[index]))
        angle = 2 * math.pi * (t / self.period + self.phase)
        wave = (1.0 if math.sin(angle) >= 0 else -1.0) if self.kind == "step" else math.sin(angle)
        return min(1.0, max(0.0, self.mean + self.amplitude * wave))


def make_traces(
    kind: str,
    nodes: int,
    *,
    seed: int = 1,
    mean: float = 0.66,
    mean_spread: float = 0.05,
    amplitude: float = 0.22,
    period_seconds: float = 1500.0,
    cool_nodes: int = 0,
    cool_mean: float = 0.35,
    recorded: Path | None = None,
) -> list[NodeTrace]:
    """One trace per node; `InvalidInput` naming the option for a bad kind or file."""
    if kind not in KINDS:
        raise InvalidInput("--trace", f"unknown trace {kind!r} (known: {', '.join(KINDS)})")
    if kind == "recorded":
        if recorded is None:
            raise InvalidInput("--trace-file", "a recorded trace needs --trace-file")
        return _recorded(recorded, nodes)
    rng = random.Random(seed)
    traces = []
    for index in range(nodes):
        node_mean = mean + mean_spread * (2 * index / max(1, nodes - 1) - 1)
        phase = 0.0 if kind == "sync" else rng.random()
        node_amplitude = amplitude * rng.uniform(0.85, 1.15)
        if index < cool_nodes:  # a node whose latency-sensitive load stays well below the watermarks
            node_mean, node_amplitude = cool_mean, amplitude / 2
        period = period_seconds * (1.0 if kind == "sync" else rng.uniform(0.9, 1.1))
        traces.append(NodeTrace(kind, node_mean, node_amplitude, period, phase))
    rng.shuffle(traces)
    return traces


def _recorded(path: Path, nodes: int) -> list[NodeTrace]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise InvalidInput("--trace-file", f"cannot read {path}: {error}") from None
    if not isinstance(raw, dict):
        raise InvalidInput("--trace-file", "expected an object with interval_seconds and nodes")
    interval = raw.get("interval_seconds", 60)
    if isinstance(interval, bool) or not isinstance(interval, int | float) or interval <= 0:
        shown = clip(interval) if isinstance(interval, str) else clip(repr(interval))
        raise InvalidInput("--trace-file.interval_seconds", f"expected seconds above 0, got {shown!r}")
    series = raw.get("nodes")
    if not isinstance(series, list) or not series:
        raise InvalidInput("--trace-file.nodes", "expected a non-empty list of series")
    parsed: list[tuple[float, ...]] = []
    for index, values in enumerate(series):
        if not isinstance(values, list) or not values or not all(_share(v) for v in values):
            raise InvalidInput(f"--trace-file.nodes[{index}]", "expected a non-empty list of shares within 0..1")
        parsed.append(tuple(float(v) for v in values))
    return [NodeTrace("recorded", 0, 0, 0, 0, parsed[i % len(parsed)], float(interval)) for i in range(nodes)]


def _share(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 <= value <= 1


def describe(traces: Sequence[NodeTrace]) -> list[dict[str, float | str]]:
    """The traces as JSON (for the summary)."""
    return [
        {
            "kind": t.kind,
            "mean": round(t.mean, 3),
            "amplitude": round(t.amplitude, 3),
            "period_seconds": round(t.period),
        }
        if t.kind != "recorded"
        else {"kind": t.kind, "samples": len(t.series), "interval_seconds": t.interval}
        for t in traces
    ]
