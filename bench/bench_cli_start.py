"""How long the `eru` command takes to start, as whole processes (docs/cli.md, "Fast start").

Targets: `eru --help` < 150 ms and `eru plan` on a small problem < 300 ms. Uses hyperfine when it is installed
(`--hyperfine`), else runs each command N times with subprocess and reports min / median / p90 wall time. Also
reports the baseline `python -c pass` so that a loaded machine's figures can be read against it.

Usage: .venv/bin/python bench/bench_cli_start.py [--runs 30] [--eru PATH]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBLEM = {
    "kind": "deploy",
    "mode": "auto",
    "count": 3,
    "request": {"cpu_bind": True, "cpu_request": 1.5, "memory_request": "512MiB"},
    "nodes": [{"name": f"n{i}", "cpu_map": {str(c): 100 for c in range(8)}, "memory": "16GiB"} for i in range(4)],
}


def measure(command: list[str], runs: int, stdin: bytes | None = None) -> dict[str, float]:
    """Wall-clock milliseconds of `runs` runs of `command` (one warm-up run first)."""
    subprocess.run(command, input=stdin, capture_output=True, check=False)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = subprocess.run(command, input=stdin, capture_output=True, check=False)
        times.append((time.perf_counter() - start) * 1000)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.decode()[-500:]}")
    ordered = sorted(times)
    return {
        "min_ms": round(ordered[0], 1),
        "median_ms": round(statistics.median(ordered), 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "runs": runs,
    }


def hyperfine(commands: dict[str, str], runs: int) -> dict[str, dict[str, float]]:
    """The same figures from hyperfine's JSON export."""
    with tempfile.NamedTemporaryFile(suffix=".json") as export:
        args = ["hyperfine", "--warmup", "1", "--runs", str(runs), "--export-json", export.name, "-N"]
        for name, command in commands.items():
            args += ["-n", name, command]
        subprocess.run(args, capture_output=True, check=True)
        data = json.loads(Path(export.name).read_text())
    return {
        result["command"]: {
            "min_ms": round(result["min"] * 1000, 1),
            "median_ms": round(result["median"] * 1000, 1),
            "p90_ms": round(sorted(result["times"])[int(0.9 * (len(result["times"]) - 1))] * 1000, 1),
            "runs": len(result["times"]),
        }
        for result in data["results"]
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--eru", default=str(Path(sys.executable).with_name("eru")))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        problem = Path(tmp) / "problem.json"
        problem.write_text(json.dumps(PROBLEM))
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "eru --help": [args.eru, "--help"],
            "eru plan problem.json": [args.eru, "plan", str(problem)],
        }
        if shutil.which("hyperfine"):
            tool = "hyperfine"
            figures = hyperfine({name: " ".join(command) for name, command in commands.items()}, args.runs)
        else:
            tool = "subprocess"
            figures = {name: measure(command, args.runs) for name, command in commands.items()}
    targets = {"eru --help": 150.0, "eru plan problem.json": 300.0}
    print(
        json.dumps(
            {
                "tool": tool,
                "figures": figures,
                "targets_ms": targets,
                "within_target": {name: figures[name]["median_ms"] < limit for name, limit in targets.items()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
