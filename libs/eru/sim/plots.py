"""PNG figures of the `eru sim` experiments (matplotlib, headless Agg backend). The only module of `eru.sim` that
writes files; the experiments themselves are pure."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from eru.planning.scorers import QOS_CLASSES
from eru.sim.compaction import ModeResult
from eru.sim.drf import DrfVariant
from eru.sim.qos import QosExperiment


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed (it is the optional `plot` extra)."""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable("matplotlib is not installed: pip install 'eru[plot]' to get the PNG plots") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_qos(experiment: QosExperiment, path: Path) -> Path:
    """Variance per class (bars) and the per-node counts per class (box plots), baseline vs qos-balance."""
    plt = _pyplot()
    figure, (bars, boxes) = plt.subplots(1, 2, figsize=(12, 4.5))
    positions = np.arange(len(QOS_CLASSES))
    runs = (("least-allocated", experiment.baseline), ("least-allocated + qos-balance", experiment.balanced))
    for offset, (label, run) in zip((-0.2, 0.2), runs, strict=True):
        bars.bar(positions + offset, [run.variance[name] for name in QOS_CLASSES], width=0.4, label=label)
    bars.set_xticks(positions, QOS_CLASSES)
    bars.set_ylabel("variance over nodes of instance count")
    bars.set_title(f"QoS balance: {experiment.instances} instances on {experiment.nodes} nodes")
    bars.legend()
    data = []
    labels = []
    for index, name in enumerate(QOS_CLASSES):
        for short, (_, run) in zip(("base", "qos"), runs, strict=True):
            data.append(run.counts[:, index])
            labels.append(f"{name[:5]}\n{short}")
    boxes.boxplot(data, tick_labels=labels)
    boxes.set_ylabel("instances of the class per node")
    boxes.set_title("per-node counts")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_drf(variants: Sequence[DrfVariant], path: Path) -> Path:
    """Each tenant's (unweighted) dominant share after every task, one panel per variant."""
    plt = _pyplot()
    columns = 3
    rows = math_ceil(len(variants), columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
    for axis, variant in zip(axes.flat, variants, strict=False):
        history = variant.raw_history()
        steps = np.arange(1, len(history) + 1)
        for tenant in variant.result.tasks:
            weight = next(t.get("weight", 1) for t in variant.problem["tenants"] if t["name"] == tenant)
            label = f"{tenant} (w={weight}, {variant.result.tasks[tenant]} tasks)"
            axis.step(steps, [step[tenant] for step in history], where="post", label=label)
        axis.set_title(variant.name)
        axis.set_xlabel("tasks handed out")
        axis.set_ylabel("dominant share")
        axis.set_ylim(0, 1)
        axis.legend(fontsize=8)
    for axis in list(axes.flat)[len(variants) :]:
        axis.set_visible(False)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_compaction(results: Sequence[ModeResult], lower_bound: int, path: Path) -> Path:
    """Per mode the range of the smallest cell over seeds (line) and its 90th percentile (marker), as Borg's
    figures; the dashed line is the resource lower bound."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(9, 0.6 * len(results) + 1.8))
    for row, result in enumerate(results):
        axis.hlines(row, min(result.nodes), max(result.nodes), color="grey", linewidth=3)
        axis.plot(result.p90, row, "o", color="tab:red")
        axis.annotate(str(result.p90), (result.p90, row), textcoords="offset points", xytext=(6, 4))
    axis.axvline(lower_bound, linestyle="--", color="tab:blue", label=f"resource lower bound ({lower_bound})")
    axis.set_yticks(range(len(results)), [result.mode for result in results])
    axis.set_xlabel("nodes needed (≤ 0.2% tasks pending); dot = p90 over seeds, bar = min..max")
    axis.set_title("Cell compaction per placement mode")
    axis.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def math_ceil(items: int, per_row: int) -> int:
    """Rows needed for `items` panels at `per_row` per row."""
    return max(1, -(-items // per_row))
