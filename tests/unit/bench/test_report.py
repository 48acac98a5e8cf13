"""The headline report (`python -m bench report`, bench/README.md): its command line answers `--help` without running
anything, the table renderer turns a report's JSON into the expected Markdown, and the readers keep the figures a
bench printed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.report import STEPS, parse_output, read_deploy, read_failover, read_replicas, read_soak
from bench.report_table import render_table

ROOT = Path(__file__).resolve().parents[3]


def test_report_help_names_the_quick_run_and_every_step() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "report", "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "--quick" in done.stdout
    assert all(step.name in done.stdout for step in STEPS)


def test_an_unknown_step_is_refused_by_name() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "report", "--only", "planning,warp"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--only: unknown step warp" in done.stderr


REPORT = {
    "quick": True,
    "machine": {"cpu": "AMD EPYC", "cores": 2, "python": "3.11.7", "load_at_start": 0.4},
    "figures": [
        {"figure": "planning", "result": "17.0 ms | fast", "goal": "< Go Eru's", "command": "python bench/x.py"},
        {"figure": "soak", "result": "not run: the quick run's 600 s were spent", "goal": "", "command": ""},
    ],
}


def test_the_table_is_markdown_with_one_row_per_figure() -> None:
    assert render_table(REPORT) == (
        "Machine: AMD EPYC, 2 cores, Python 3.11.7, load 0.4 at the start; `python -m bench report --quick`.\n"
        "\n"
        "| figure | result | goal | command |\n"
        "|---|---|---|---|\n"
        "| planning | 17.0 ms \\| fast | < Go Eru's | `python bench/x.py` |\n"
        "| soak | not run: the quick run's 600 s were spent | — | — |\n"
    )


def test_a_full_report_names_the_full_command_and_an_unknown_machine_says_so() -> None:
    text = render_table({"quick": False, "machine": {}, "figures": []})
    assert text.splitlines()[0] == "Machine: unknown CPU; `python -m bench report`."


def _burst(per_second: float, total_ms: float, requests: int) -> dict[str, object]:
    return {
        "requests": requests,
        "containers_per_second": per_second,
        "cpu_ms_per_container": {"allocator": 1.0, "total": total_ms},
        "rounds_containers_per_second": [per_second],
    }


def test_the_readers_keep_the_benches_figures() -> None:
    deploy = {"results": [{"replicas": 1, "requests_of_1": _burst(339.0, 4.24, 2000)}]}
    (row,) = read_deploy(deploy, "cmd")
    assert row["figure"] == "single-container requests at once (2,000 requests)"
    assert row["result"] == "339 containers/s (rounds 339), 4.24 ms CPU per container"
    replicas = {
        "results": [
            {"replicas": 1, "requests_of_1": _burst(400.0, 2.0, 500)},
            {"replicas": 3, "requests_of_1": _burst(380.0, 2.5, 500)},
        ]
    }
    (row,) = read_replicas(replicas, "cmd")
    assert row["result"] == "throughput 0.95× (380 against 400/s), CPU efficiency 0.80×"
    soak_lines = '{"t": 15}\n{"summary": {"requests": 3000, "ended": 3000, "completed_p99_ms_median": 210.5,' + (
        ' "completed_p99_ms_max": 400.0, "lost": {"unanswered": 0}, "options": {"rate": 50.0, "duration": 60,'
        ' "retention": 300}, "checks": {"rss_flat": false, "b": false, "all": false}}}\n'
    )
    (row,) = read_soak(parse_output(soak_lines, json_lines=True), "cmd")
    assert row["figure"] == "soak at 50 deploys/s"
    assert row["result"].endswith("checks not met: b; growth not judged (shorter than twice the retention)")
    failover = {"recovered_seconds": {"median": float("inf"), "max": float("inf")}, "rounds": 1, "within_10_s": 0}
    failover |= {"lost": 0, "doubled": 0, "violations": 0, "per_round": [{"stream_leader_seconds": 4.56}]}
    (row,) = read_failover(failover, "cmd")
    assert row["result"].startswith("recovered in median never, max never over 1 round(s), 0 within 10 s; ERU_DEPLOY")
