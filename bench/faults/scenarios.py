"""The scenarios of the fault suite: each injects one fault into a running stack during (or after) a burst of
deploys and returns its figures (docs/reliability.md)."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass
from typing import Any

from bench.faults.checks import invariant_violations, ledger_ghosts, unsettled
from bench.faults.stack import FaultStack, eru
from bench.faults.traffic import Traffic, deploys_flowing, settle_outcomes


@dataclass(frozen=True)
class Options:
    """How big and how long: the full suite's defaults; `--short` shrinks them."""

    burst: int = 200
    burst_seconds: float = 6.0
    down_seconds: float = 5.0
    pg_outage_seconds: float = 60.0
    recover_within: float = 60.0
    settle_seconds: float = 90.0
    fuzz_messages: int = 10_000
    quiet_seconds: float = 90.0


def _port_open(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(0.5)
        return probe.connect_ex(("127.0.0.1", port)) == 0


async def _wait_port(port: int, up: bool, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if _port_open(port) == up:
            return True
        await asyncio.sleep(0.2)
    return False


def _client_view(traffic: Traffic) -> dict[str, int]:
    """The outcomes as the client saw them (when the ledger cannot be read: the stack is gone)."""
    counts = {"sent": len(traffic.sent), "ok": 0, "error": 0, "lost": 0, "double": 0, "refused_at_publish": 0}
    for entry in traffic.sent.values():
        if entry.refused:
            counts["refused_at_publish"] += 1
            counts["error"] += 1
        elif entry.reply is None:
            counts["lost"] += 1
        elif entry.reply.get("status") == "error":
            counts["error"] += 1
        else:
            counts["ok"] += 1
    return counts


async def _figures(stack: FaultStack, traffic: Traffic, opts: Options, fault_end: float) -> dict[str, Any]:
    """Recovery, outcomes, invariants and settling after a fault. When the fault took the whole stack down (the
    supervisor gave up), the outcomes are the client's view and nothing recovered."""
    if not stack.alive().get("supervisor", False):
        await asyncio.sleep(2.0)  # replies still on their way
        await traffic.close()
        return {**_client_view(traffic), "stack_torn_down": True, "recover_seconds": None, "alive": stack.alive()}
    flowing = await deploys_flowing(stack.nats_url, opts.recover_within)
    recovered = None if flowing is None else round(time.monotonic() - fault_end, 2)
    if not stack.alive().get("supervisor", False):
        await traffic.close()
        return {**_client_view(traffic), "stack_torn_down": True, "recover_seconds": None, "alive": stack.alive()}
    counts = await settle_outcomes(traffic, stack.dsn, opts.settle_seconds)
    await traffic.close()
    violations = await invariant_violations(stack.dsn)
    pending = await unsettled(stack.nats_url, opts.quiet_seconds)
    return {
        **counts,
        "violations": len(violations),
        "violation_examples": violations[:3],
        "unsettled": sum(pending.values()),
        "unsettled_consumers": pending,
        "recover_seconds": recovered,
        "alive": stack.alive(),
    }


async def kill_during_burst(stack: FaultStack, target: str, opts: Options) -> dict[str, Any]:
    """kill -9 of `target` a third into a burst; a killed server (nats-server, postgres) is started again after
    `down_seconds` unless the supervisor already did; a killed service is the supervisor's to restart."""
    traffic = await Traffic.open(stack.nats_url)
    burst = asyncio.create_task(traffic.burst(opts.burst, opts.burst_seconds))
    await asyncio.sleep(opts.burst_seconds / 3)
    supervised = stack.alive().get("supervisor", False)
    pid = stack.kill(target)
    restarted_by_harness = False
    if target in ("nats-server", "postgres"):
        port = stack.nats_port if target == "nats-server" else stack.postgres_port
        await asyncio.sleep(opts.down_seconds)
        # the supervisor restarts a killed server; a second restarter would fight it over the data directory
        back = _port_open(port) or (supervised and await _wait_port(port, up=True, within=opts.recover_within))
        if not back:
            await asyncio.to_thread(stack.restart_server, target)
            restarted_by_harness = True
    fault_end = time.monotonic()
    await burst
    figures = await _figures(stack, traffic, opts, fault_end)
    restarted = stack.pid_of(target)
    figures["killed_pid"] = pid
    figures["restarted_by_harness"] = restarted_by_harness
    figures["restarted_by_supervisor"] = not restarted_by_harness and restarted is not None and restarted != pid
    return figures


async def postgres_outage(stack: FaultStack, opts: Options) -> dict[str, Any]:
    """PostgreSQL stopped for `pg_outage_seconds` while deploys keep coming: over the Unix socket (as `eru up` gives
    its services) a reconnect finds no socket file (ENOENT), over TCP the port refuses (ECONNREFUSED)."""
    traffic = await Traffic.open(stack.nats_url)
    seconds = opts.burst_seconds + opts.pg_outage_seconds
    burst = asyncio.create_task(traffic.burst(opts.burst, seconds))
    await asyncio.sleep(opts.burst_seconds / 3)
    with stack.supervisor_paused() as supervised:  # one restarter only: the supervisor, once the outage is over
        await asyncio.to_thread(stack.stop_postgres)
        await _wait_port(stack.postgres_port, up=False, within=10)
        await asyncio.sleep(opts.pg_outage_seconds)
    restarted_by_supervisor = supervised and await _wait_port(stack.postgres_port, up=True, within=30)
    if not restarted_by_supervisor:
        await asyncio.to_thread(stack.restart_server, "postgres")
    fault_end = time.monotonic()
    await burst
    figures = await _figures(stack, traffic, opts, fault_end)
    figures["outage_seconds"] = opts.pg_outage_seconds
    figures["restarted_by_supervisor"] = restarted_by_supervisor
    figures["postgres_over"] = stack.postgres_over
    return figures


async def postgres_outage_over_tcp(stack: FaultStack, opts: Options) -> dict[str, Any]:
    """The same outage on a stack of its own whose services reach PostgreSQL over loopback TCP (`eru up
    --postgres-over tcp`), brought up next to the suite's and taken down after."""
    other = FaultStack(stack.state_dir.with_name(stack.state_dir.name + "-tcp"), stack.sim_nodes, postgres_over="tcp")
    other.inventory_seconds = stack.inventory_seconds
    try:
        up_seconds = await asyncio.to_thread(other.up)
        before = dict(other.reload().restarts)
        figures = await postgres_outage(other, opts)
        figures["up_seconds"] = round(up_seconds, 1)
        after = other.reload().restarts if other.alive().get("supervisor", False) else {}
        figures["own_stack_restarts"] = {
            name: n - before.get(name, 0) for name, n in after.items() if n > before.get(name, 0)
        }
        return figures
    finally:
        await asyncio.to_thread(other.down)
        other.force_cleanup()


async def supervisor_killed_then_down(stack: FaultStack, opts: Options) -> dict[str, Any]:
    """kill -9 of the `eru up` supervisor, then `eru down`: every process must be gone and the ports free."""
    stack.kill("supervisor")
    started = time.monotonic()
    result = await asyncio.to_thread(stack.down)
    ports_free = not _port_open(stack.nats_port) and not _port_open(stack.postgres_port)
    return {
        "down_exit_code": result["exit_code"],
        "down_seconds": round(time.monotonic() - started, 2),
        "left_running": result["left_running"],
        "orphans": len(result["left_running"]),
        "ports_free": ports_free,
        "down_said": result["output"][-300:],
    }


async def node_agent_restart(stack: FaultStack, opts: Options, process: str = "node-agent-sim") -> dict[str, Any]:
    """The node agent killed -9 mid-burst: once it runs again (the supervisor's job) with an empty simulated engine,
    the ledger must hold no container that its node does not run, within a few inventory periods."""
    figures = await kill_during_burst(stack, process, opts)
    if figures.get("stack_torn_down"):
        return figures
    if figures["restarted_by_supervisor"]:
        await asyncio.sleep(3 * stack.inventory_seconds + 2)
    figures["ledger_ghosts"] = await ledger_ghosts(eru, str(stack.state_dir))
    return figures
