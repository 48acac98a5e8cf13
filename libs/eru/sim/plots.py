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
from eru.sim.guarantee import GuaranteeRun
from eru.sim.qos import QosExperiment


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed (it is the optional `plot` extra)."""


INSTALL_HINT = "matplotlib is not installed: pip install 'eru[plot]' to get the PNG plots (the tables need nothing)"
RUN_COLOURS = ("tab:blue", "tab:orange")
FONT = {"font.size": 11, "axes.titlesize": 13, "axes.labelsize": 11, "legend.fontsize": 10}


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise PlotUnavailable(INSTALL_HINT) from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot

    plt: Any = pyplot  # rcParams is typed by literal key; FONT's keys are checked by matplotlib at run time
    plt.rcParams.update(FONT)
    return plt


def _integer_ticks(axis: Any, which: str = "x") -> None:
    """Counts (tasks, nodes) get whole-number ticks only: no `2.5 tasks`."""
    from matplotlib.ticker import MaxNLocator

    getattr(axis, f"{which}axis").set_major_locator(MaxNLocator(integer=True))


def plot_qos(experiment: QosExperiment, path: Path) -> Path:
    """Variance per class (bars) and the per-node counts per class (box plots), baseline vs qos-balance, with one
    colour per run in both panels and one legend."""
    plt = _pyplot()  # first: without matplotlib, PlotUnavailable says how to install it
    from matplotlib.patches import Patch

    figure, (bars, boxes) = plt.subplots(1, 2, figsize=(13, 5))
    positions = np.arange(len(QOS_CLASSES))
    runs = (("least-allocated", experiment.baseline), ("least-allocated + qos-balance", experiment.balanced))
    for offset, colour, (label, run) in zip((-0.2, 0.2), RUN_COLOURS, runs, strict=True):
        values = [run.variance[name] for name in QOS_CLASSES]
        drawn = bars.bar(positions + offset, values, width=0.4, label=label, color=colour)
        bars.bar_label(drawn, fmt="%.1f", padding=2, fontsize=9)
    bars.set_xticks(positions, QOS_CLASSES)
    bars.set_ylabel("variance over nodes (instances²)")
    bars.set_title(f"Spread of each QoS class: {experiment.instances} instances, {experiment.nodes} nodes")
    bars.margins(y=0.15)
    for offset, colour, (_, run) in zip((-0.2, 0.2), RUN_COLOURS, runs, strict=True):
        data = [run.counts[:, index] for index in range(len(QOS_CLASSES))]
        boxes.boxplot(
            data,
            positions=positions + offset,
            widths=0.35,
            patch_artist=True,
            boxprops={"facecolor": colour, "alpha": 0.6},
            medianprops={"color": "black"},
        )
    boxes.set_xticks(positions, QOS_CLASSES)
    _integer_ticks(boxes, "y")
    boxes.set_ylabel("instances of the class on one node")
    boxes.set_title("Per-node counts (box: quartiles, whiskers: 1.5 IQR)")
    handles = [Patch(color=colour, label=label) for colour, (label, _) in zip(RUN_COLOURS, runs, strict=True)]
    figure.legend(handles=handles, loc="lower center", ncol=2, frameon=False)
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_drf(variants: Sequence[DrfVariant], path: Path) -> Path:
    """Each tenant's (unweighted) dominant share after every task, one panel per variant, in percent."""
    plt = _pyplot()
    from matplotlib.ticker import PercentFormatter

    columns = 3
    rows = math_ceil(len(variants), columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5.2 * columns, 3.8 * rows), squeeze=False)
    for axis, variant in zip(axes.flat, variants, strict=False):
        history = variant.raw_history()
        steps = np.arange(1, len(history) + 1)
        for tenant in variant.result.tasks:
            weight = next(t.get("weight", 1) for t in variant.problem["tenants"] if t["name"] == tenant)
            label = f"{tenant}: weight {weight}, {variant.result.tasks[tenant]} tasks"
            axis.step(steps, [step[tenant] for step in history], where="post", label=label, linewidth=2)
        axis.set_title(variant.name)
        axis.set_xlabel("tasks handed out (all tenants)")
        axis.set_ylabel("dominant share of the pod")
        axis.set_ylim(0, 1)
        axis.yaxis.set_major_formatter(PercentFormatter(1.0))
        _integer_ticks(axis)
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", fontsize=9)
    for axis in list(axes.flat)[len(variants) :]:
        axis.set_visible(False)
    figure.suptitle("DRF progressive filling: each tenant's dominant share as tasks are handed out")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_guarantee(runs: Sequence[GuaranteeRun], cores: int, path: Path) -> Path:
    """G's cores and the bursting tenants' cores after every step, one panel per variant, with G's guarantee."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(runs), figsize=(6.2 * len(runs), 4.2), squeeze=False)
    for axis, run in zip(axes.flat, runs, strict=True):
        steps = np.arange(len(run.held))
        for tenant in run.held[0]:
            width = 2.5 if tenant == "G" else 1.5
            axis.step(steps, [held[tenant] for held in run.held], where="post", label=tenant, linewidth=width)
        guaranteed = max(run.quota, 1) if run.quota else None
        if guaranteed:
            axis.axhline(guaranteed, color="black", linestyle="--", linewidth=1, label=f"G's quota {run.quota}")
        axis.set_title(run.name)
        axis.set_xlabel("step (G's requests arrive at step 1; one burst task ends per step)")
        axis.set_ylabel(f"cores held (pod: {cores})")
        axis.set_ylim(0, max(max(held.values()) for held in run.held) * 1.25)
        _integer_ticks(axis)
        axis.grid(alpha=0.3)
        axis.legend(loc="upper right", fontsize=9)
    figure.suptitle("Quota as a guarantee: a burst of other tenants cannot take the headroom held for G")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_compaction(results: Sequence[ModeResult], lower_bound: int, path: Path) -> Path:
    """Per mode the range of the smallest cell over seeds (bar) and its 90th percentile (dot), as Borg's figures;
    the dashed line is the resource lower bound. Whole-node ticks, a range of at least a few nodes."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(10, 0.6 * len(results) + 2.2))
    for row, result in enumerate(results):
        axis.hlines(row, min(result.nodes), max(result.nodes), color="grey", linewidth=4)
        axis.plot(result.p90, row, "o", color="tab:red", markersize=8)
        axis.annotate(f"p90 {result.p90}", (result.p90, row), textcoords="offset points", xytext=(8, 6))
    axis.axvline(lower_bound, linestyle="--", color="tab:blue")
    low = min([lower_bound, *(min(r.nodes) for r in results)])
    high = max([lower_bound, *(max(r.nodes) for r in results)])
    pad = max(2, round(0.1 * (high - low)))
    axis.set_xlim(low - pad, high + pad)
    _integer_ticks(axis)
    axis.set_yticks(range(len(results)), [result.mode for result in results])
    axis.set_ylim(-0.6, len(results) - 0.4)
    axis.set_xlabel("nodes in the cell (smallest with ≤ 0.2% of tasks pending)")
    axis.set_title("Cell compaction per placement mode (fewer nodes is better)")
    axis.grid(axis="x", alpha=0.3)
    from matplotlib.lines import Line2D

    legend = [
        Line2D([], [], color="grey", linewidth=4, label="min..max over seeds"),
        Line2D([], [], color="tab:red", marker="o", linestyle="", label="90th percentile"),
        Line2D([], [], color="tab:blue", linestyle="--", label=f"resource lower bound ({lower_bound} nodes)"),
    ]
    axis.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=3, frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def math_ceil(items: int, per_row: int) -> int:
    """Rows needed for `items` panels at `per_row` per row."""
    return max(1, -(-items // per_row))
