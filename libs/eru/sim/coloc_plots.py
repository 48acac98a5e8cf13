"""PNG figures of `eru sim colocation` (matplotlib, headless): what happened over time, per policy, and the summary
figures side by side. Writes files; the experiment itself (`eru.sim.colocation`) is pure."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eru.sim.plots import _pyplot

Results = Mapping[str, tuple[dict[str, Any], dict[str, list[float]]]]
BARS = (
    ("evictions_per_job_hour", "evictions per job-hour", 0.5),
    ("share_evicted_3_or_more", "share of instances evicted ≥ 3 times", 0.05),
    ("largest_share_evicted_in_window", "largest share of the workload evicted in one window", 0.25),
    ("work_lost_share", "share of batch work lost", 0.2),
    ("waiting_share", "share of time waiting for room", None),
    ("ls_satisfaction", "latency-sensitive satisfaction", None),
)


def plot_timeline(results: Results, path: Path) -> Path:
    """Per policy: instances running and waiting, cumulative evictions (left axis, counts) and the pod's mean
    latency-sensitive load (right axis, % of CPU), over simulated minutes."""
    plt = _pyplot()
    figure, axes = plt.subplots(len(results), 1, figsize=(11, 3.4 * len(results)), squeeze=False, sharex=True)
    for axis, (name, (summary, series)) in zip(axes[:, 0], results.items(), strict=True):
        minutes = series["t"]
        axis.plot(minutes, series["running"], label="batch instances running", color="tab:green")
        axis.plot(minutes, series["waiting"], label="batch instances waiting", color="tab:orange")
        axis.plot(minutes, series["evictions"], label="evictions so far", color="tab:red")
        axis.set_ylabel("instances / evictions")
        axis.set_title(
            f"{name}: {summary['evictions']} evictions, {summary['evictions_per_job_hour']} per job-hour, "
            f"{summary['work_lost_share']:.0%} of batch work lost, {summary['jobs_completed']} jobs done"
            + (" (placed nothing: no room survives a peak)" if "why_nothing_placed" in summary else "")
        )
        load = axis.twinx()
        load.plot(minutes, series["ls_mean"], color="tab:blue", alpha=0.35, label="mean LS load (% CPU)")
        load.set_ylabel("latency-sensitive load, % of CPU")
        load.set_ylim(0, 100)
        lines = axis.get_legend_handles_labels()
        extra = load.get_legend_handles_labels()
        axis.legend(lines[0] + extra[0], lines[1] + extra[1], loc="upper left", fontsize=8)
        axis.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("simulated time, minutes")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def plot_summary(results: Results, path: Path) -> Path:
    """The issue's figures per policy as bars, with the target line where the issue sets one."""
    plt = _pyplot()
    figure, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    names = list(results)
    for axis, (key, label, target) in zip(axes.flat, BARS, strict=True):
        values = [float(results[name][0][key]) for name in names]
        bars = axis.bar(range(len(names)), values, color=["tab:grey" if n == "baseline" else "tab:blue" for n in names])
        axis.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=8)
        if target is not None:
            axis.axhline(target, color="tab:red", linestyle="--", label=f"target ≤ {target:g}")
            axis.legend(fontsize=8, loc="upper right")
        axis.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
        axis.set_title(label, fontsize=10)
        axis.set_ylim(0, max([*values, target or 0, 0.01]) * 1.25)
    why = [
        f"{name}: {results[name][0]['why_nothing_placed']}"
        for name in names
        if "why_nothing_placed" in results[name][0]
    ]
    if why:  # a run that placed nothing says so on the figure, not only as a waiting share of 100 %
        figure.text(0.5, 0.005, "\n".join(why), ha="center", va="bottom", fontsize=8, color="tab:red", wrap=True)
    reclaim = ", ".join(
        f"{name} reclaim {results[name][0].get('reclaim_ratio', 0):.2f}, node CPU "
        f"{results[name][0].get('node_cpu_utilization_mean', 0):.0%}"
        for name in names
    )
    figure.suptitle(f"eru sim colocation: each policy over the same traces. {reclaim}", fontsize=10)
    figure.tight_layout(rect=(0, 0.06 if why else 0, 1, 1))
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
