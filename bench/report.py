"""The headline figures in one run: `python -m bench report [--quick]` (bench/README.md, docs/performance.md).

Each step runs one bench of the headline set as its own process (the command shown beside its figures, so any figure
can be re-run alone), reads its JSON and keeps the figures a user cares about: in-process planning against Go Eru,
single-container requests and requests of 100 through the stack, three allocator replicas against one, 10,000
containers at scale, NATS failover recovery, and a soak. Progress goes to stderr (one line per step, with its time);
stdout carries the report as JSON, then (`--markdown`, the default) the same figures as a Markdown table.

`--quick` picks sizes that fit in about ten minutes on a 2-core machine (16 nodes, 500 singles, 20 requests of
100, scale at 100 nodes, two failover rounds, a 60-s soak); a step that fails or runs past its time is reported as
such in its row, and the others still run.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Figure = dict[str, Any]
QUICK_BUDGET_SECONDS = 600.0  # `--quick` as a whole: a step that would start later is reported as not run
MIN_STEP_SECONDS = 45.0  # no step of the headline set finishes in less (a stack starts, registers, drains)


@dataclass(frozen=True)
class Step:
    """One bench of the headline set: its command (full and quick), how long it may take, how to read it."""

    name: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    timeout_full: float
    timeout_quick: float
    read: Callable[[dict[str, Any], str], list[Figure]]
    json_lines: bool = False  # the last line of stdout is the summary (failover, soak), not one JSON document


def _row(figure: str, result: str, goal: str, command: str) -> Figure:
    return {"figure": figure, "result": result, "goal": goal, "command": command}


def read_pipeline(data: dict[str, Any], command: str) -> list[Figure]:
    """bench_pipeline.py: the cpu-bind pipeline of 10,000 instances on 1,000 idle nodes against Go Eru's 1,037 ms."""
    case = data["figures"]["cpu_bind_pipeline_idle"]
    result = f"{case['median_ms']:.1f} ms median ({case['ratio_to_go']:.3f}× Go Eru's {case['go_eru_ms']:,.0f} ms)"
    return [_row("planning in process: 10,000 cpu-bind instances on 1,000 nodes", result, "< Go Eru's", command)]


def read_deploy(data: dict[str, Any], command: str) -> list[Figure]:
    """bench_deploy.py with one replica: singles and requests of 100, containers/s and CPU per container."""
    result = data["results"][0]
    rows = []
    for key, label, goal in (
        ("requests_of_1", "single-container requests at once", "≥ 1,000/s"),
        ("requests_of_100", "requests of 100 containers at once", "≥ 5,000/s"),
    ):
        if key in result:
            burst = result[key]
            cpu = burst["cpu_ms_per_container"]["total"]
            rounds = " / ".join(f"{r:,.0f}" for r in burst.get("rounds_containers_per_second", []))
            text = f"{burst['containers_per_second']:,.0f} containers/s (rounds {rounds}), {cpu} ms CPU per container"
            rows.append(_row(f"{label} ({burst['requests']:,} requests)", text, goal, command))
    return rows


def read_replicas(data: dict[str, Any], command: str) -> list[Figure]:
    """bench_deploy.py --replicas 1,3: throughput and CPU efficiency of three allocators against one, one pod."""
    by_count = {r["replicas"]: r["requests_of_1"] for r in data["results"]}
    one, three = by_count[1], by_count[3]
    throughput = three["containers_per_second"] / one["containers_per_second"]
    efficiency = one["cpu_ms_per_container"]["total"] / three["cpu_ms_per_container"]["total"]
    text = (
        f"throughput {throughput:.2f}× ({three['containers_per_second']:,.0f} against "
        f"{one['containers_per_second']:,.0f}/s), CPU efficiency {efficiency:.2f}×"
    )
    return [_row("3 allocator replicas against 1, one pod", text, "≥ 0.9× each", command)]


def read_scale(data: dict[str, Any], command: str) -> list[Figure]:
    """bench_scale.py: 10,000 containers in requests of 100 on N sim nodes."""
    rows = []
    for run in data["results"]:
        outcomes = run.get("outcomes", {})
        text = (
            f"{run['seconds']} s, {outcomes.get('completed', 0)} of {run['requests']} completed, "
            f"{run['cpu_seconds_total']} CPU-s; registration {run['register_seconds']} s"
        )
        goal = "< 10 s" if run["nodes"] == 1000 else "—"
        rows.append(_row(f"{run['containers']:,} containers on {run['nodes']:,} sim nodes", text, goal, command))
    return rows


def _seconds(value: Any) -> str:
    """A recovery time: `7.3 s`, or `never` for a round that did not recover within its traffic (None or inf)."""
    if value is None or value == float("inf"):
        return "never"
    return f"{value} s"


def read_failover(data: dict[str, Any], command: str) -> list[Figure]:
    """bench_failover --scenario cluster: recovery after the leading nats-server is killed, and when ERU_DEPLOY had a
    leader again (the election, which eru cannot shorten)."""
    seconds = data["recovered_seconds"]
    elected = [r["stream_leader_seconds"] for r in data.get("per_round", []) if r.get("stream_leader_seconds")]
    span = (
        f"{min(elected)}–{max(elected)}"
        if elected and min(elected) != max(elected)
        else f"{elected[0]}"
        if elected
        else ""
    )
    leader = f"; ERU_DEPLOY's leader elected after {span} s" if elected else ""
    text = (
        f"recovered in median {_seconds(seconds['median'])}, max {_seconds(seconds['max'])} over {data['rounds']} "
        f"round(s), {data['within_10_s']} within 10 s{leader}; lost {data['lost']}, doubled {data['doubled']}, "
        f"violations {data['violations']}"
    )
    return [_row("NATS failover (3-server cluster, leader killed)", text, "≤ 10 s, 0 lost", command)]


def read_soak(data: dict[str, Any], command: str) -> list[Figure]:
    """bench.soak: the summary line's checks and latency. Growth is judged between the middle and the end of a run;
    in a run shorter than twice the retention both lie inside the first retention window, while history, metrics and
    streams still fill, so those checks are reported as not judged rather than as failed."""
    summary = data["summary"]
    checks = summary["checks"]
    options = summary["options"]
    short = float(options.get("duration", 0)) < 2 * float(options.get("retention", 0))
    growth = ("storage_flat", "rss_flat", "logs_bounded", "logs_within_cap")
    failed = [n for n, ok in checks.items() if n != "all" and not ok and not (short and n in growth)]
    verdict = "every check met" if not failed else f"checks not met: {', '.join(failed)}"
    if short:
        verdict += "; growth not judged (shorter than twice the retention)"
    lost = sum(v for v in summary["lost"].values() if isinstance(v, int | float))
    text = (
        f"{summary['requests']:,} requests, {summary['ended']:,} ended, lost {lost}; completed p99 "
        f"median of windows {summary['completed_p99_ms_median']} ms, worst {summary['completed_p99_ms_max']} ms; "
        + verdict
    )
    return [_row(f"soak at {options['rate']:g} deploys/s", text, "p99 median < 250 ms, 0 lost", command)]


PY = ("python",)
STEPS = (
    Step(
        "planning",
        (*PY, "bench/bench_pipeline.py", "--runs", "7", "--skip-white-paper"),
        (*PY, "bench/bench_pipeline.py", "--runs", "3", "--skip-white-paper"),
        300,
        60,
        read_pipeline,
    ),
    Step(
        "deploy",
        (
            *PY,
            "bench/bench_deploy.py",
            "--nodes",
            "16",
            "--small",
            "2000",
            "--large",
            "60",
            "--rounds",
            "3",
            "--replicas",
            "1",
        ),
        (
            *PY,
            "bench/bench_deploy.py",
            "--nodes",
            "16",
            "--small",
            "500",
            "--large",
            "20",
            "--rounds",
            "1",
            "--replicas",
            "1",
        ),
        900,
        180,
        read_deploy,
    ),
    Step(
        "replicas",
        (*PY, "bench/bench_deploy.py", "--nodes", "16", "--small", "2000", "--large", "0", "--replicas", "1,3"),
        (*PY, "bench/bench_deploy.py", "--nodes", "16", "--small", "500", "--large", "0", "--replicas", "1,3"),
        900,
        180,
        read_replicas,
    ),
    Step(
        "scale",
        (*PY, "bench/bench_scale.py", "--nodes", "1000", "--agents", "2"),
        (*PY, "bench/bench_scale.py", "--nodes", "100", "--agents", "2"),
        900,
        180,
        read_scale,
    ),
    Step(
        "failover",
        (*PY, "-m", "bench.bench_failover", "--scenario", "cluster", "--rounds", "10"),
        (*PY, "-m", "bench.bench_failover", "--scenario", "cluster", "--rounds", "1"),
        1200,
        180,
        read_failover,
        json_lines=True,
    ),
    Step(
        "soak",
        (*PY, "-m", "bench.soak", "--rate", "50", "--live", "3000", "--duration", "1200", "--sample", "30"),
        (*PY, "-m", "bench.soak", "--rate", "50", "--live", "1000", "--duration", "60", "--sample", "15"),
        1800,
        240,
        read_soak,
        json_lines=True,
    ),
)


def cpu_model() -> str:
    """The CPU's model name as lscpu shows it (/proc/cpuinfo), or the platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def parse_output(stdout: str, json_lines: bool) -> dict[str, Any]:
    """A bench's JSON: the whole of stdout, or its last non-empty line."""
    if json_lines:
        lines = [line for line in stdout.splitlines() if line.strip()]
        if not lines:
            raise ValueError("no output")
        parsed: dict[str, Any] = json.loads(lines[-1])
        return parsed
    document: dict[str, Any] = json.loads(stdout)
    return document


def stop(process: subprocess.Popen[str]) -> None:
    """A bench past its time: SIGINT first, so that its own clean-up runs (`eru down` of the stack it started, the
    soak's drain and summary), then SIGKILL of its process group after 150 s."""
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGINT)
    try:
        process.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


def run_step(
    step: Step, quick: bool, say: Callable[[str], None], budget: float | None = None
) -> tuple[list[Figure], dict[str, Any] | None]:
    """Run one step's command, for at most its own time (and what is left of `budget`); its figures (or one row
    saying why there are none) and its JSON."""
    argv = step.quick if quick else step.full
    timeout = step.timeout_quick if quick else step.timeout_full
    if budget is not None:
        timeout = min(timeout, budget)
    shown = " ".join(argv)
    started = time.monotonic()
    command = [sys.executable, *argv[1:]] if argv[0] == "python" else list(argv)
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop(process)
        say(f"  {step.name}: not finished within {timeout:.0f} s, stopped")
        return [_row(step.name, f"not run to the end: stopped after {timeout:.0f} s", "", shown)], None
    seconds = time.monotonic() - started
    data: dict[str, Any] | None = None
    try:
        data = parse_output(stdout, step.json_lines)
        figures = step.read(data, shown)
    except (ValueError, KeyError, TypeError, IndexError, ZeroDivisionError) as error:
        tail = (stderr.strip().splitlines() or ["no error output"])[-1][:200]
        say(f"  {step.name}: failed after {seconds:.0f} s (exit {process.returncode}): {tail}")
        failed = f"failed (exit {process.returncode}, {type(error).__name__}: {error}): {tail}"
        return [_row(step.name, failed, "", shown)], data  # what it printed stays in `raw`
    say(f"  {step.name}: done in {seconds:.0f} s")
    return figures, data


def report(quick: bool, only: tuple[str, ...], say: Callable[[str], None]) -> dict[str, Any]:
    """Run the chosen steps one after another (in the project's root, where the commands are written for) and
    gather their figures; steps left out by `only` are rows saying so."""
    machine = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "load_at_start": round(os.getloadavg()[0], 2),
    }
    figures: list[Figure] = []
    raw: dict[str, Any] = {}
    chosen = [step for step in STEPS if not only or step.name in only]
    deadline = time.monotonic() + QUICK_BUDGET_SECONDS if quick else None
    for step in STEPS:
        shown = " ".join(step.quick if quick else step.full)
        if step not in chosen:
            figures.append(_row(step.name, "not run (left out by --only)", "", shown))
            continue
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left < MIN_STEP_SECONDS:
            say(f"  {step.name}: skipped, the quick run's {QUICK_BUDGET_SECONDS:.0f} s are spent")
            figures.append(
                _row(step.name, f"not run: the quick run's {QUICK_BUDGET_SECONDS:.0f} s were spent", "", shown)
            )
            continue
        say(f"[{chosen.index(step) + 1}/{len(chosen)}] {step.name}: {shown}")
        rows, data = run_step(step, quick, say, left)
        figures.extend(rows)
        if data is not None:
            raw[step.name] = data
    machine["load_at_end"] = round(os.getloadavg()[0], 2)
    return {"quick": quick, "machine": machine, "figures": figures, "raw": raw}
