"""A nats-server killed mid-burst on `eru up --nats-cluster 3`: the figures (docs/deploy.md "Failover, measured").

Starts its own stack (free ports, a temporary state directory, 8 simulated nodes), sends `--total` single-container
deploys at `--rate`/s from one client listing all three servers, kills the server leading ERU_DEPLOY with SIGKILL
after `--kill-after` answers, waits for every answer, reads the ledger, stops the stack and prints one JSON object:
answered / stored / answered twice, deploys and containers per request, settled rows, usage problems, answers per
second before and after the kill, the seconds until answers flowed at half the earlier rate again, and the load.

Usage: .venv/bin/python bench/bench_nats_failover.py [--total 1000] [--rate 50] [--kill-after 300] [--runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from eru.testing.cluster_failover import deploy_through_a_failover, ledger
from eru.testing.cluster_stack import ClusterStack


def one_run(total: int, rate: float, kill_after: int) -> dict[str, Any]:
    """One stack, one failover, its figures."""
    with tempfile.TemporaryDirectory(prefix="eru-failover-") as directory:
        stack = ClusterStack(Path(directory) / "state", sim_nodes=8)
        try:
            stack.up()
            load_before = os.getloadavg()[0]
            figures = asyncio.run(deploy_through_a_failover(stack, total, rate, kill_after))
            answers = figures.pop("answers")
            found = asyncio.run(ledger(stack.info().database_dsn, figures.pop("request_ids")))
        finally:
            stack.force_cleanup()
    figures["errors"] = sum(1 for replies in answers.values() if replies[0].get("status") != "accepted")
    figures["load_average"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    return {**figures, **{k: dict(v) if isinstance(v, Counter) else v for k, v in found.items()}}


def main() -> None:
    """Run and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--kill-after", type=int, default=300)
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    runs = [one_run(args.total, args.rate, args.kill_after) for _ in range(args.runs)]
    recovered = [run["recovered_after_seconds"] for run in runs]
    print(json.dumps({"runs": runs, "recovered_after_seconds": recovered}, indent=1))


if __name__ == "__main__":
    main()
