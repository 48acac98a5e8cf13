"""`eru sim colocation`: the experiment runs the real functions and the policy beats the baseline (small pods)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eru.cli import commands  # noqa: F401  (registers the commands)
from eru.cli.app import app
from eru.sim.coloc_model import BASELINE, Policy, Scenario
from eru.sim.coloc_traces import make_traces
from eru.sim.colocation import run_colocation

SMALL = Scenario(nodes=3, instances=10, hours=0.75, warmup_seconds=1500.0, step_seconds=10.0)


def test_on_an_oscillating_pod_the_baseline_ping_pongs_and_the_policy_does_not() -> None:
    traces = make_traces("sync", SMALL.nodes, seed=3)
    results = run_colocation(SMALL, traces, {"baseline": BASELINE, "policy": Policy()})
    base, policy = results["baseline"][0], results["policy"][0]
    assert base["evictions"] > SMALL.instances  # every peak evicts what the trough let in
    assert base["work_lost_share"] > 0.5
    assert policy["evictions"] == 0
    assert policy["placed_back_within_backoff"] == 0
    assert policy["ls_satisfaction"] >= base["ls_satisfaction"]


def test_in_a_mixed_pod_the_policy_keeps_the_work_the_baseline_throws_away() -> None:
    traces = make_traces("sine", SMALL.nodes, seed=1, cool_nodes=2)
    results = run_colocation(SMALL, traces, {"baseline": BASELINE, "policy": Policy()})
    base, policy = results["baseline"][0], results["policy"][0]
    assert policy["evictions_per_job_hour"] <= 0.5
    assert policy["share_evicted_3_or_more"] <= 0.05
    assert policy["work_lost_share"] <= 0.2
    assert policy["largest_share_evicted_in_window"] <= 0.25
    assert policy["batch_cpu_hours_kept"] >= base["batch_cpu_hours_kept"] * 0.9


def test_budget_alone_caps_the_share_evicted_in_any_window() -> None:
    traces = make_traces("sync", SMALL.nodes, seed=3)
    only_budget = Policy(peak_room=False, node_backoff=False, budget=True, progress=False, keep=False)
    summary = run_colocation(SMALL, traces, {"b": only_budget})["b"][0]
    assert summary["budget_allowed_per_window"] == 3  # 25 % of 10, rounded up
    assert summary["largest_evicted_in_window"] <= 3
    assert summary["budget_refusals"] > 0


def test_the_command_prints_json_and_writes_two_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed: pip install 'eru[plot]' for the PNG plots")
    args = ["sim", "colocation", "--nodes", "3", "--instances", "6", "--hours", "0.1", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout[result.stdout.index("{") :])
    assert set(report["results"]) == {"baseline", "policy"}
    assert {"evictions_per_job_hour", "ls_satisfaction", "waiting_share"} <= set(report["results"]["policy"])
    assert (tmp_path / "colocation-sine-timeline.png").stat().st_size > 0
    assert (tmp_path / "colocation-sine-summary.png").stat().st_size > 0


def test_bad_options_are_refused_naming_them(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["sim", "colocation", "--off", "magic", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--off" in result.output
    result = CliRunner().invoke(app, ["sim", "colocation", "--trace", "recorded", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--trace-file" in result.output


def test_the_verb_is_found_by_the_real_entry_point() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "eru.cli", "sim", "colocation", "--help"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "--off" in done.stdout


def test_a_recorded_trace_drives_the_pod(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"interval_seconds": 300, "nodes": [[0.3, 0.9, 0.3], [0.2, 0.25, 0.3]]}))
    traces = make_traces("recorded", 3, recorded=trace)
    assert [t.at(0) for t in traces] == [0.3, 0.2, 0.3]  # three nodes reuse the two series in turn
    assert traces[0].at(400) == 0.9
    small = Scenario(nodes=3, instances=6, hours=0.5, warmup_seconds=900.0, step_seconds=10.0)
    summary = run_colocation(small, traces, {"policy": Policy()})["policy"][0]
    assert summary["evictions"] == 0
    assert summary["batch_cpu_hours_kept"] > 0  # the node whose recorded peak is 30 % takes the batch


def test_under_the_evict_watermark_with_a_deep_queue_batch_reclaims_the_room_under_the_suppress_line() -> None:
    """The issue's scenario (`eru sim colocation --mean 0.45 --amplitude 0.2 --instances 200`): LS peaks stay under
    the evict watermark and the batch queue is deeper than the room."""
    scenario = Scenario(instances=200)
    traces = make_traces("sine", scenario.nodes, seed=1, mean=0.45, amplitude=0.2)
    policy = run_colocation(scenario, traces, {"policy": Policy()})["policy"][0]
    assert policy["reclaim_ratio"] >= 0.85
    assert policy["ls_satisfaction"] >= 0.999
    assert policy["evictions_per_job_hour"] <= 0.5
    assert policy["share_evicted_3_or_more"] <= 0.05
    assert policy["work_lost_share"] <= 0.2
    assert 0 < policy["node_cpu_utilization_mean"] <= 1
    assert "why_nothing_placed" not in policy


def test_a_run_that_placed_nothing_says_why() -> None:
    traces = make_traces("sync", SMALL.nodes, seed=3, mean=0.8, amplitude=0.1)
    summary = run_colocation(SMALL, traces, {"policy": Policy()})["policy"][0]
    assert summary["jobs_placed"] == 0
    assert "no node ever offered batch room" in summary["why_nothing_placed"]
    assert summary["reclaim_ratio"] == 0.0
