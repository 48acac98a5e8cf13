"""What N registered sim nodes cost while nothing is deployed (docs/performance.md "Scale: the idle stack").

A fresh `eru up --detach` (embedded NATS and PostgreSQL, auth on, no console) with `--sim-nodes N` and `--agents`
sim node-agent processes; the time until every node is registered and healthy (a row in `nodes`, state up, a
heartbeat within the node TTL); a settling pause; then, over `--idle-seconds` of idle:

* each process's CPU seconds (user + system, PostgreSQL and nats-server with their children) and cores (CPU seconds
  per second of the window), and the total;
* the messages stored per second into each JetStream stream (its last sequence before and after: free to read);
* the log lines each process wrote per minute, and its lines at warning or error level (with the first few events);
* the supervisor's restarts since the stack started;

and then, over `--tap-seconds` after the CPU window (a tap costs nats-server a delivery per message, so it is kept
out of the CPU figures), the messages per second through nats-server by kind of subject (a subscriber on `>`,
the node names in the subjects replaced by `*`). `eru down` at the end.

Usage: python bench/bench_idle.py [--nodes 1000] [--agents 2] [--idle-seconds 60] [--tap-seconds 10]
Prints one JSON document on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg

from bench_scale import cpu_seconds, eru
from eru.bus import connect
from eru.logging import configure_logging
from eru.testing.nats_server import free_port

HEALTHY_SQL = """
SELECT count(*) FROM nodes n JOIN node_status s ON s.name = n.name
 WHERE n.state = 'up' AND s.heartbeat_at > now() - make_interval(secs => $1)
"""
STREAMS = ("ERU_NODE", "ERU_EVENTS", "ERU_METRICS", "ERU_DEPLOY", "ERU_DLQ")
NODE_NAME = re.compile(r"^sim\d*-\d+$")
LOUD = re.compile(r'"level":\s*"(warning|error|critical)"')


def progress(text: str) -> None:
    """One line of progress on stderr."""
    print(f"[bench_idle {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


async def wait_until_healthy(dsn: str, nodes: int, within: float, ttl: float) -> float:
    """Seconds until `nodes` nodes are registered, up and heartbeating within `ttl`."""
    started = time.perf_counter()
    conn = await asyncpg.connect(dsn)
    try:
        while True:
            healthy = await conn.fetchval(HEALTHY_SQL, ttl)
            if healthy >= nodes:
                return time.perf_counter() - started
            if time.perf_counter() - started > within:
                raise RuntimeError(f"only {healthy} of {nodes} nodes healthy after {within:.0f} s")
            await asyncio.sleep(0.5)
    finally:
        await conn.close()


async def healthy_count(dsn: str, ttl: float) -> int:
    """Nodes registered, up and heartbeating within `ttl` now."""
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(HEALTHY_SQL, ttl))
    finally:
        await conn.close()


async def stream_sequences(nats_url: str) -> dict[str, int]:
    """Each stream's last sequence (messages stored since the stream began)."""
    nc = await connect(nats_url, name="bench-idle")
    try:
        js = nc.jetstream()
        found = {}
        for name in STREAMS:
            try:
                info = await js.stream_info(name)
            except Exception:  # a stream the stack does not have
                continue
            found[name] = int(info.state.last_seq)
        return found
    finally:
        await nc.close()


def subject_kind(subject: str) -> str:
    """A subject with node names (and ids after `_INBOX.` or a consumer name) replaced by `*`."""
    tokens = subject.split(".")
    if tokens[0].startswith("_INBOX"):  # `_INBOX.<id>` and a client's own prefix (`_INBOX_allocator.<id>`)
        return f"{tokens[0]}.*"
    if subject.startswith("$JS.API.CONSUMER.MSG.NEXT."):
        return "$JS.API.CONSUMER.MSG.NEXT.*"
    if subject.startswith("$JS.ACK."):
        return "$JS.ACK.*"
    return ".".join("*" if NODE_NAME.match(token) else token for token in tokens)


async def tap(nats_url: str, seconds: float) -> dict[str, Any]:
    """Messages per second through nats-server by kind of subject, and their bytes, over `seconds`."""
    nc = await connect(nats_url, name="bench-idle-tap")
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()

    async def on_message(msg: Any) -> None:
        kind = subject_kind(msg.subject)
        counts[kind] += 1
        sizes[kind] += len(msg.data)

    try:
        await nc.subscribe(">", cb=on_message, pending_msgs_limit=1_000_000, pending_bytes_limit=1 << 30)
        await nc.flush()
        await asyncio.sleep(seconds)
    finally:
        await nc.close()
    total = sum(counts.values())
    return {
        "messages_per_second": round(total / seconds, 1),
        "bytes_per_second": round(sum(sizes.values()) / seconds, 1),
        "by_subject": {
            kind: {"per_second": round(count / seconds, 2), "bytes_per_message": round(sizes[kind] / count)}
            for kind, count in counts.most_common(25)
        },
    }


def log_lines(logs: Path) -> dict[str, tuple[int, int, list[str]]]:
    """Each log file's lines, its lines at warning or above, and the events of the first few of those."""
    found = {}
    for path in sorted(logs.glob("*.log")):
        lines = loud = 0
        events: list[str] = []
        with path.open(errors="replace") as handle:
            for line in handle:
                lines += 1
                if LOUD.search(line):
                    loud += 1
                    if len(events) < 5:
                        match = re.search(r'"event":\s*"([^"]*)"', line)
                        events.append(match.group(1) if match else line[:160])
        found[path.stem] = (lines, loud, events)
    return found


async def one_run(nodes: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """A fresh stack of `nodes` sim nodes, its idle figures, the stack stopped."""
    state = root / f"n{nodes}"
    agents = max(1, min(args.agents, nodes))
    up = ["up", "--state-dir", str(state), "--detach", "--no-console", "--sim-nodes", str(nodes)]
    up += ["--nats-port", str(free_port()), "--postgres-port", str(free_port()), "--replicas", f"node-agent={agents}"]
    progress(f"eru up: {nodes} sim nodes over {agents} agent processes")
    began = time.perf_counter()
    started = eru(*up)
    if started.returncode != 0:
        raise RuntimeError(f"eru up failed: {started.stdout}{started.stderr}")
    up_seconds = time.perf_counter() - began
    try:
        info = json.loads((state / "stack.json").read_text())
        healthy = await wait_until_healthy(info["database_dsn"], nodes, args.register_within, args.ttl)
        progress(f"{nodes} nodes healthy {healthy:.1f} s after eru up returned ({up_seconds:.1f} s)")
        await asyncio.sleep(args.settle_seconds)
        info = json.loads((state / "stack.json").read_text())  # a restarted process has a new pid
        restarts_before = dict(info.get("restarts") or {})
        processes = {**info["processes"], **info["server_pids"]}
        logs_before = log_lines(state / "logs")
        sequences_before = await stream_sequences(info["nats_url"])
        cpu_before = cpu_seconds(processes)
        window_started = time.perf_counter()
        progress(f"idle window of {args.idle_seconds:.0f} s")
        await asyncio.sleep(args.idle_seconds)
        cpu_after = cpu_seconds(processes)
        seconds = time.perf_counter() - window_started
        sequences_after = await stream_sequences(info["nats_url"])
        logs_after = log_lines(state / "logs")
        still_healthy = await healthy_count(info["database_dsn"], args.ttl)
        progress(f"tap of {args.tap_seconds:.0f} s")
        admin = state / "auth" / "admin.url"  # the admin may subscribe to `>` (the operator only to `eru.>`)
        tap_url = admin.read_text().strip() if admin.exists() else info["nats_url"]
        tapped = await tap(tap_url, args.tap_seconds) if args.tap_seconds > 0 else None
        restarts = json.loads((state / "stack.json").read_text()).get("restarts") or {}
        spent = {name: round(cpu_after[name] - cpu_before.get(name, 0.0), 2) for name in sorted(cpu_after)}
        return {
            "nodes": nodes,
            "node_agents": agents,
            "up_seconds": round(up_seconds, 1),
            "healthy_seconds": round(healthy, 1),
            "healthy_after_window": still_healthy,  # nodes
            "window_seconds": round(seconds, 1),
            "idle_cpu_seconds": spent,
            "idle_cpu_seconds_total": round(sum(spent.values()), 2),
            "idle_cores": {name: round(value / seconds, 3) for name, value in spent.items()},
            "idle_cores_total": round(sum(spent.values()) / seconds, 3),
            "stored_per_second": {
                name: round((sequences_after[name] - sequences_before.get(name, 0)) / seconds, 1)
                for name in sorted(sequences_after)
            },
            "log_lines_per_minute": {
                name: round((lines - logs_before.get(name, (0, 0, []))[0]) * 60 / seconds, 1)
                for name, (lines, _, _) in logs_after.items()
            },
            "loud_lines_since_up": {name: loud for name, (_, loud, _) in logs_after.items() if loud},
            "loud_events": {name: events for name, (_, _, events) in logs_after.items() if events},
            "restarts_since_up": {name: count for name, count in sorted(restarts.items()) if count},
            "restarts_in_window": {
                name: count - restarts_before.get(name, 0)
                for name, count in sorted(restarts.items())
                if count > restarts_before.get(name, 0)
            },
            "tap": tapped,
        }
    finally:
        progress("eru down")
        eru("down", "--state-dir", str(state))
        if args.keep_logs:
            shutil.copytree(state / "logs", args.keep_logs / f"n{nodes}", dirs_exist_ok=True)


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="eru-bench-idle-"))
    results = []
    try:
        for nodes in args.nodes:
            load = os.getloadavg()[0]
            figures = await one_run(nodes, args, root)
            figures["load_before"] = round(load, 2)
            figures["load_after"] = round(os.getloadavg()[0], 2)
            results.append(figures)
            progress(json.dumps({k: figures[k] for k in ("nodes", "healthy_seconds", "idle_cores_total")}))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version()}
    print(json.dumps({"bench": "idle", "machine": machine, "results": results}, indent=2))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=lambda t: [int(x) for x in t.split(",")], default=[1000])
    parser.add_argument("--agents", type=int, default=2, help="sim node-agent processes sharing the nodes")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="seconds of idle CPU measured")
    parser.add_argument("--settle-seconds", type=float, default=10.0, help="seconds between healthy and the window")
    parser.add_argument("--tap-seconds", type=float, default=10.0, help="seconds of counting messages (0: none)")
    parser.add_argument("--ttl", type=float, default=30.0, help="a healthy node heartbeated within this many seconds")
    parser.add_argument("--register-within", type=float, default=600.0, help="seconds for the nodes to be healthy")
    parser.add_argument("--keep-logs", type=Path, default=None, help="directory to copy each stack's logs into")
    return parser.parse_args()


if __name__ == "__main__":
    configure_logging("bench", "bench", log_format="json", level="warning")  # stdout stays one JSON document
    asyncio.run(main(parse_args()))
