"""`python -m bench.faults [--short] [--only NAME …]`: the fault suite; prints JSON (docs/reliability.md)."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.faults.checks import bugs_logged, invariant_violations, log_sizes, unsettled
from bench.faults.cli_fuzz import cli_fuzz
from bench.faults.client_fuzz import client_fuzz
from bench.faults.docker_agent import docker_agent_restart
from bench.faults.fuzz import fuzz
from bench.faults.probes import probe
from bench.faults.scenarios import (
    Options,
    kill_during_burst,
    node_agent_restart,
    postgres_outage,
    postgres_outage_over_tcp,
    supervisor_killed_then_down,
)
from bench.faults.stack import FaultStack
from bench.faults.traffic import Traffic, deploys_flowing, settle_outcomes

SHORT = Options(
    burst=40,
    burst_seconds=3.0,
    down_seconds=2.0,
    pg_outage_seconds=8.0,
    recover_within=30.0,
    settle_seconds=45.0,
    fuzz_messages=500,
    quiet_seconds=90.0,  # > every consumer's ack_wait (node agents: 60 s): a lost ack is redelivered by then
)
SCENARIOS = (
    "baseline",
    "kill-allocator",
    "kill-distributor",
    "kill-eviction",
    "kill-node-agent-sim",
    "kill-console",
    "restart-node-agent-docker",
    "kill-nats-server",
    "kill-postgres",
    "postgres-outage",
    "postgres-outage-tcp",
    "fuzz",
    "client-fuzz",
    "cli-fuzz",
    "permission-probes",
    "supervisor-kill-then-down",
)
TARGETS = (
    "lost",
    "double",
    "violations",
    "unsettled",
    "other_tenants_changed",
    "other_tenants_leaked",
    "handler_errors",
    "handler_errors_logged",
    "cli_failures",
)


async def baseline(stack: FaultStack, opts: Options) -> dict[str, Any]:
    """A burst with no fault: what every other scenario is compared with."""
    traffic = await Traffic.open(stack.nats_url)
    started = time.monotonic()
    await traffic.burst(opts.burst, opts.burst_seconds)
    counts = await settle_outcomes(traffic, stack.dsn, opts.settle_seconds)
    await traffic.close()
    return {
        **counts,
        "seconds": round(time.monotonic() - started, 2),
        "violations": len(await invariant_violations(stack.dsn)),
        "unsettled": sum((await unsettled(stack.nats_url, opts.quiet_seconds)).values()),
    }


async def after_fuzz(
    stack: FaultStack, opts: Options, figures: dict[str, Any], logs_before: dict[str, int]
) -> dict[str, Any]:
    """`figures` of a fuzz, completed: do deploys flow again (and how soon), do the invariants hold, is everything
    settled, is the stack alive, did any service log a handler error or a traceback since `logs_before`
    (checks.log_sizes); the unanswered requests count as lost."""
    ended = time.monotonic()
    flowing = await deploys_flowing(stack.nats_url, opts.recover_within)
    figures["recover_seconds"] = None if flowing is None else round(time.monotonic() - ended, 2)
    figures["violations"] = len(await invariant_violations(stack.dsn))
    pending = await unsettled(stack.nats_url, opts.quiet_seconds)
    figures["unsettled"] = sum(pending.values())
    figures["unsettled_consumers"] = pending
    figures["lost"] = figures["unanswered"]
    figures["stack_alive"] = stack.alive()
    figures["handler_errors_logged"], figures["handler_errors_logged_examples"] = bugs_logged(
        stack.state_dir, logs_before
    )
    return figures


async def fuzzing(stack: FaultStack, opts: Options) -> dict[str, Any]:
    """The fuzzed messages, then: is the stack still serving, is everything settled, do the invariants hold?"""
    nodes = [f"sim-{i:03d}" for i in range(1, stack.sim_nodes + 1)] if stack.sim_nodes > 1 else ["sim"]
    logs_before = log_sizes(stack.state_dir)
    figures = await fuzz(stack.admin_url, opts.fuzz_messages, nodes)
    return await after_fuzz(stack, opts, figures, logs_before)


async def client_fuzzing(stack: FaultStack, opts: Options) -> dict[str, Any]:
    """A fifth as many fuzzed messages again, as a tenant's client naming other tenants' things (client_fuzz.py)."""
    logs_before = log_sizes(stack.state_dir)
    figures = await client_fuzz(stack, max(50, opts.fuzz_messages // 5))
    if "skipped" in figures:
        return figures
    return await after_fuzz(stack, opts, figures, logs_before)


async def cli_fuzzing(stack: FaultStack, opts: Options) -> dict[str, Any]:
    """Every verb that takes text or a file, run with strings no one can write (cli_fuzz.py): a tenth as many cases
    as fuzzed messages, at least two rounds of the verbs; then the stack must still serve and have logged no bug."""
    logs_before = log_sizes(stack.state_dir)
    figures = await asyncio.to_thread(cli_fuzz, stack.state_dir, max(66, opts.fuzz_messages // 10))
    flowing = await deploys_flowing(stack.nats_url, opts.recover_within)
    figures["recover_seconds"] = None if flowing is None else 0.0
    figures["handler_errors_logged"], figures["handler_errors_logged_examples"] = bugs_logged(
        stack.state_dir, logs_before
    )
    figures["stack_alive"] = stack.alive()
    return figures


def runner(name: str) -> Callable[[FaultStack, Options], Awaitable[dict[str, Any]]]:
    """The coroutine of a scenario."""
    if name == "baseline":
        return baseline
    if name == "kill-node-agent-sim":
        return node_agent_restart
    if name == "restart-node-agent-docker":
        return docker_agent_restart
    if name.startswith("kill-"):
        target = name.removeprefix("kill-")
        return lambda stack, opts: kill_during_burst(stack, target, opts)
    if name == "postgres-outage":
        return postgres_outage
    if name == "postgres-outage-tcp":
        return postgres_outage_over_tcp
    if name == "fuzz":
        return fuzzing
    if name == "client-fuzz":
        return client_fuzzing
    if name == "cli-fuzz":
        return cli_fuzzing
    if name == "permission-probes":
        return lambda stack, _opts: probe(stack, "sim-001" if stack.sim_nodes > 1 else "sim")
    if name == "supervisor-kill-then-down":
        return supervisor_killed_then_down
    raise SystemExit(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")


def restarts_since(before: dict[str, int], stack: FaultStack) -> dict[str, int]:
    """What the supervisor restarted since `before` (its restart counts in stack.json): a scenario that kills
    nothing must see nothing restarted, or it ran against a flapping stack."""
    if stack.info is None or not stack.alive().get("supervisor", False):
        return {}
    after = stack.reload().restarts
    return {name: count - before.get(name, 0) for name, count in sorted(after.items()) if count > before.get(name, 0)}


def ensure_up(stack: FaultStack) -> dict[str, Any] | None:
    """Bring the stack back when a fault took it down (what the supervisor should have done is reported)."""
    if stack.info is not None and all(stack.alive().values()):
        return None
    dead = sorted(name for name, alive in stack.alive().items() if not alive) if stack.info else []
    stack.down()
    stack.force_cleanup()
    stack.up()
    return {"stack_restarted_by_harness": True, "dead_before": dead}


def verdict(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Totals over every scenario and whether each target holds."""
    totals = {key: sum(int(r.get(key) or 0) for r in results.values()) for key in TARGETS}
    slow = [name for name, r in results.items() if r.get("recover_seconds") is not None and r["recover_seconds"] > 10]
    never = [name for name, r in results.items() if "recover_seconds" in r and r["recover_seconds"] is None]
    failed = [name for name, r in results.items() if "failure" in r]
    allowed = [name for name, r in results.items() if r.get("allowed")]
    return {
        **totals,
        "recovered_later_than_10s": slow,
        "never_recovered": never,
        "scenario_errors": failed,
        "probes_allowed": allowed,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    opts = SHORT if args.short else Options()
    if args.pg_outage is not None:
        opts = dataclasses.replace(opts, pg_outage_seconds=args.pg_outage)
    if args.fuzz is not None:
        opts = dataclasses.replace(opts, fuzz_messages=args.fuzz)
    names = args.only or list(SCENARIOS)
    state_dir = Path(tempfile.mkdtemp(prefix="eru-faults-"))
    stack = FaultStack(state_dir / "stack", sim_nodes=2 if args.short else 4)
    results: dict[str, dict[str, Any]] = {}
    report: dict[str, Any] = {"command": " ".join(["python -m bench.faults", *sys.argv[1:]])}
    try:
        report["up_seconds"] = round(await asyncio.to_thread(stack.up), 1)
        for name in names:
            started = time.monotonic()
            try:
                revived = await asyncio.to_thread(ensure_up, stack)
                restarts_before = dict(stack.reload().restarts)
                result = await runner(name)(stack, opts)
                if revived:
                    result["before"] = revived
                result["restarts"] = restarts_since(restarts_before, stack)
            except Exception as error:  # a scenario that breaks is reported, the suite goes on
                result = {"failure": f"{type(error).__name__}: {error}"}
            result["scenario_seconds"] = round(time.monotonic() - started, 1)
            results[name] = result
            print(f"faults: {name}: {json.dumps(result)[:300]}", file=sys.stderr, flush=True)
        report["secrets_in_logs"] = stack.secrets_in_logs()
    finally:
        stack.down()
        stack.force_cleanup()
        if not args.keep:
            shutil.rmtree(state_dir, ignore_errors=True)
    report["options"] = dataclasses.asdict(opts)
    report["scenarios"] = results
    report["verdict"] = verdict(results)
    return report


def markdown(report: dict[str, Any]) -> str:
    """The report as the table of docs/reliability.md."""
    lines = [
        "| scenario | sent | ok | error | lost | double | violations | unsettled | recover s | notes |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in report["scenarios"].items():
        notes = []
        for key in ("failure", "skipped"):
            if key in r:
                notes.append(str(r[key])[:90])
        if r.get("stack_torn_down"):
            notes.append("the whole stack went down (client's view)")
        for key in (
            "refused_at_publish",
            "refused_by_bus",
            "unanswered",
            "ledger_ghosts",
            "orphans",
            "denied",
        ):
            if r.get(key):
                notes.append(f"{key} {r[key]}")
        if "other_tenants_changed" in r:
            theirs = r["other_tenants_containers"]
            notes.append(f"other tenants' containers changed: {r['other_tenants_changed']} of {theirs}")
            notes.append(f"answers holding their ids: {r.get('other_tenants_leaked')}")
        if "left_running" in r:
            notes.append(f"left running: {', '.join(r['left_running']) or 'nothing'}; ports free: {r['ports_free']}")
        cells = [str(r.get(key, "-")) for key in ("sent", "ok", "error", "lost", "double", "violations", "unsettled")]
        recover = r.get("recover_seconds", "-")
        lines.append(
            f"| `{name}` | {' | '.join(cells)} | {'never' if recover is None else recover} | {'; '.join(notes)} |"
        )
    lines.append(
        f"\nsecrets in logs: {report.get('secrets_in_logs')} lines; verdict: `{json.dumps(report['verdict'])}`"
    )
    return "\n".join(lines)


def main() -> None:
    """Parse the options, run the suite, print the JSON report on stdout (progress on stderr)."""
    from eru.logging import configure_logging

    configure_logging("faults", "faults", log_format="console", level="error")  # reconnect warnings are expected
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__)
    parser.add_argument("--short", action="store_true", help="the reduced suite (CI): small bursts, 8 s outage")
    parser.add_argument("--only", nargs="+", metavar="NAME", help=f"only these scenarios ({', '.join(SCENARIOS)})")
    parser.add_argument("--pg-outage", type=float, help="seconds PostgreSQL stays stopped (default 60; short 8)")
    parser.add_argument("--fuzz", type=int, help="fuzzed messages (default 10,000; short 500)")
    parser.add_argument("--keep", action="store_true", help="keep the stack's state directory (logs) afterwards")
    parser.add_argument(
        "--markdown", metavar="REPORT", help="print an earlier JSON report as docs/reliability.md's table"
    )
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(Path(args.markdown).read_text())))
        return
    report = asyncio.run(run(args))
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
