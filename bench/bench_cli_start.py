"""How long the `eru` command takes to start, as whole processes (docs/cli.md, "Fast start").

Targets: `eru --help` < 150 ms and `eru plan` on a small problem < 300 ms. Uses hyperfine when it is installed,
else runs each command N times with subprocess and reports min / median / p90 wall time and the median CPU time
(user + system of the child: much less sensitive than wall time to other load on a shared machine). Also reports
the baseline `python -c pass` so that a loaded machine's figures can be read against it.

Usage: .venv/bin/python bench/bench_cli_start.py [--runs 30] [--eru PATH] [--source DIR]
  --source DIR: run `python -m eru.cli` from another checkout's packages (e.g. a git worktree of an older commit),
  for before/after figures on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(command: list[str], runs: int, env: dict[str, str] | None = None) -> dict[str, float]:
    """Wall-clock and CPU milliseconds of `runs` runs of `command` (one warm-up run first)."""
    subprocess.run(command, capture_output=True, check=False, env=env)
    times = []
    cpu = []
    for _ in range(runs):
        start, start_cpu = time.perf_counter(), _cpu_seconds()
        result = subprocess.run(command, capture_output=True, check=False, env=env)
        times.append((time.perf_counter() - start) * 1000)
        cpu.append((_cpu_seconds() - start_cpu) * 1000)
        if result.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.decode()[-500:]}")
    ordered = sorted(times)
    return {
        "min_ms": round(ordered[0], 1),
        "median_ms": round(statistics.median(ordered), 1),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
        "cpu_median_ms": round(statistics.median(cpu), 1),
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


def eru_bytecode_compiled(source: str | None) -> bool:
    """Whether eru's own modules have up-to-date .pyc files: an editable install has none until `make setup`
    byte-compiles them, and without them every start compiles ~40 modules (docs/cli.md, "Fast start")."""
    import importlib.util

    spec = importlib.util.find_spec("eru")
    if source:
        root = Path(source) / "libs"
    elif spec is not None and spec.origin is not None:
        root = Path(spec.origin).parent.parent
    else:
        return False
    module = root / "eru" / "plan_api.py"
    cached = Path(importlib.util.cache_from_source(str(module)))
    return cached.exists() and cached.stat().st_mtime >= module.stat().st_mtime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--eru", default=str(Path(sys.executable).with_name("eru")))
    parser.add_argument("--source", help="a checkout whose packages to run (python -m eru.cli)")
    parser.add_argument("--no-hyperfine", action="store_true", help="subprocess timing even when hyperfine exists")
    args = parser.parse_args()
    eru = [args.eru]
    env = None
    if args.source:
        root = Path(args.source)
        packages = ["libs", "services/allocator", "services/distributor", "services/node-agent", "services/eviction"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(root / p) for p in packages)}
        eru = [sys.executable, "-m", "eru.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        problem = Path(tmp) / "problem.json"
        problem.write_text(json.dumps(PROBLEM))
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "eru --help": [*eru, "--help"],
            "eru plan problem.json": [*eru, "plan", str(problem)],
        }
        if shutil.which("hyperfine") and not args.source and not args.no_hyperfine:
            tool = "hyperfine"
            figures = hyperfine({name: " ".join(command) for name, command in commands.items()}, args.runs)
        else:
            tool = "subprocess"
            figures = {name: measure(command, args.runs, env) for name, command in commands.items()}
    targets = {"eru --help": 150.0, "eru plan problem.json": 300.0}
    print(
        json.dumps(
            {
                "tool": tool,
                "source": args.source or "installed",
                "load_average": os.getloadavg(),
                "eru_bytecode_compiled": eru_bytecode_compiled(args.source),
                "figures": figures,
                "targets_ms": targets,
                "within_target": {name: figures[name]["median_ms"] < limit for name, limit in targets.items()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
