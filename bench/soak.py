"""Soak: `eru up` under steady churn for a long time, sampling what grows (docs/performance.md "The soak").

A plain client sends `--rate` deploys per second (1–5 containers each) to an `eru up` stack with `--sim-nodes` sim
nodes and removes the oldest containers so that about `--live` stay running. Every `--sample` seconds it prints one
JSON line: RSS per process, rows and bytes per table, bytes per stream, bytes per log file, publish→reply and
publish→completed percentiles of the window, what was lost so far, PostgreSQL's deadlock count. At the end: one
summary line with the slopes (per minute, over the second half), end/middle ratios, and the checks of issue 19's
measurement (nothing lost, no deadlock, storage and RSS flat, p99 under 250 ms as the median of windows, no window
over 1 s). Only those JSON lines go to stdout; its clients' log lines and `eru down`'s report go to stderr.

Usage: python -m bench.soak [--rate 50] [--live 3000] [--duration 1200] [--retention 300] [--log-max-bytes 10MiB]
                            [--sim-nodes 16] [--sample 30] [--state-dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import Any

from bench.soak_probe import Probe, percentile
from bench.soak_trace import Tracer

TERMINAL = ("completed", "partial", "failed")


def parse_bytes(text: str) -> int:
    """`10MiB`, `512KiB`, `1GiB` or a plain number of bytes."""
    from eru.units import parse_bytes as parse

    return parse(text, "log_max_bytes")


class Load:
    """The client: deploys at a fixed rate, removes the oldest containers beyond the live target, measures."""

    def __init__(self, nc: Any, args: argparse.Namespace) -> None:
        self.nc = nc
        self.args = args
        self.rng = random.Random(19)
        self.sent: dict[str, float] = {}  # deploy id → publish time
        self.sizes: dict[str, int] = {}  # deploy id → containers asked, until it ends
        self.reply_ms: list[float] = []
        self.done_ms: list[float] = []
        self.requests = 0
        self.accepted = 0
        self.refused: dict[str, int] = {}
        self.unanswered = 0
        self.ended: dict[str, str] = {}
        self.live: deque[str] = deque()
        self.removed = 0
        self.remove_errors = 0
        self.pending_removes: set[asyncio.Task[None]] = set()
        self.until = time.monotonic() + args.duration
        self.tracer: Tracer | None = Tracer() if args.trace else None

    async def on_event(self, msg: Any) -> None:
        from eru.bus.codec import decode
        from eru.domain import DeployEvent

        if msg.subject == "eru.deploy.request":
            return
        event = decode(msg.data, DeployEvent)
        if self.tracer is not None:
            self.tracer.on_deploy_event(event.deploy_id, event.kind, time.perf_counter())
        if event.kind not in TERMINAL or event.deploy_id in self.ended:
            return
        self.ended[event.deploy_id] = event.kind
        self.sizes.pop(event.deploy_id, None)
        started = self.sent.pop(event.deploy_id, None)
        if started is not None:
            self.done_ms.append(1000 * (time.perf_counter() - started))
        self.live.extend(event.started)

    async def deploy(self, index: int) -> None:
        from eru.bus import RemoteError, RequestTimeout, request
        from eru.bus.subjects import DEPLOY_REQUEST
        from eru.domain import Accepted, DeployRequest

        req = DeployRequest.model_validate(
            {
                "request_id": f"soak-{index}",
                "pod": "default",
                "count": self.rng.randint(1, 5),
                "workload": {
                    "name": f"soak-{index % 20}",
                    "image": "busybox",
                    "resources": {"cpu_request": 0.01, "memory_request": "4MiB"},
                },
            }
        )
        self.requests += 1
        started = time.perf_counter()
        if self.tracer is not None:
            self.tracer.on_publish(req.request_id, started)
        try:
            accepted = await request(self.nc, DEPLOY_REQUEST, req, Accepted, 30)
        except RemoteError as error:
            self.refused[error.code] = self.refused.get(error.code, 0) + 1
            return
        except RequestTimeout:
            self.unanswered += 1
            return
        replied = time.perf_counter()
        self.reply_ms.append(1000 * (replied - started))
        if self.tracer is not None:
            self.tracer.on_reply(req.request_id, accepted.deploy_id, replied)
        self.accepted += 1
        if accepted.deploy_id not in self.ended:
            self.sent[accepted.deploy_id] = started
            self.sizes[accepted.deploy_id] = req.count

    async def remove_oldest(self) -> None:
        from eru.bus import request
        from eru.bus.subjects import allocator_operation
        from eru.domain.messages import OperationReply, RemoveRequest

        # containers of deploys still starting count too: under lag the live set would otherwise grow past the target
        excess = len(self.live) + sum(self.sizes.values()) - self.args.live
        count = min(excess, 200, len(self.live))  # only started containers can go (the rest are still starting)
        if count <= 0:
            return
        ids = [self.live.popleft() for _ in range(count)]
        try:
            await request(self.nc, allocator_operation("remove"), RemoveRequest(container_ids=ids), OperationReply, 30)
            self.removed += len(ids)
        except Exception:  # counted: a remove that did not answer is a loss to report, not a crash of the bench
            self.remove_errors += 1

    async def run(self) -> None:
        """Send at the rate until `self.until` (moved to now by SIGINT/SIGTERM: the run then drains and reports)."""
        interval = 1.0 / self.args.rate
        loop = asyncio.get_running_loop()
        due = loop.time()
        index = 0
        tasks: set[asyncio.Task[None]] = set()
        last_remove = 0.0
        while time.monotonic() < self.until:
            task = asyncio.create_task(self.deploy(index))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            index += 1
            if loop.time() - last_remove >= 0.5:
                last_remove = loop.time()
                remover = asyncio.create_task(self.remove_oldest())
                tasks.add(remover)
                remover.add_done_callback(tasks.discard)
            due += interval
            await asyncio.sleep(max(0.0, due - loop.time()))
        if tasks:
            await asyncio.wait(tasks, timeout=60)

    def window(self) -> dict[str, Any]:
        """Latency of the window since the last call, then reset."""
        reply, done = self.reply_ms, self.done_ms
        self.reply_ms, self.done_ms = [], []
        return {
            "deploys": len(reply),
            "reply_p50_ms": round(statistics.median(reply), 1) if reply else None,
            "reply_p99_ms": round(percentile(reply, 0.99), 1) if reply else None,
            "completed_p50_ms": round(statistics.median(done), 1) if done else None,
            "completed_p99_ms": round(percentile(done, 0.99), 1) if done else None,
        }

    def lost(self) -> dict[str, int]:
        """Requests that got no answer, and accepted deploys with no terminal event yet."""
        return {"unanswered": self.unanswered, "not_ended": len(self.sent), "remove_errors": self.remove_errors}


PORT_ATTEMPTS = 3


def start_stack(args: argparse.Namespace, state_dir: Path) -> dict[str, str]:
    """`eru up --detach` with the soak's retention and log cap; returns the environment it ran with."""
    from eru.testing.nats_server import free_port

    env = {
        **os.environ,
        "ERU_RETENTION_SECONDS": str(args.retention),
        "ERU_LOG_MAX_BYTES": str(args.log_max_bytes),
        "ERU_LOG_LEVEL": args.log_level,
        # metrics too keep only the retention (their default hour would outlast a 20-minute run)
        "ERU_BUS__METRICS_MAX_AGE_SECONDS": str(args.retention),
        # sim nodes big enough that the live containers always fit (refusals would measure capacity, not growth)
        "ERU_NODE_AGENT__CPU_CORES": "64",
        "ERU_NODE_AGENT__MEMORY": str(256 * 1024**3),
    }
    command = [
        sys.executable,
        "-m",
        "eru.cli",
        "up",
        "--detach",
        "--state-dir",
        str(state_dir),
        "--sim-nodes",
        str(args.sim_nodes),
        "--console-port",
        "0",  # the web console on any free port: never the shared default (docs/console.md)
    ]
    # A port free when probed can be taken before `eru up` binds it (another test worker's servers): `eru up`
    # refuses that in its first second, naming the port, before it starts anything; new ports then, a few times.
    for attempt in range(1, PORT_ATTEMPTS + 1):
        ports = ["--nats-port", str(free_port()), "--postgres-port", str(free_port())]
        done = subprocess.run([*command, *ports], env=env, timeout=180, capture_output=True, text=True)
        if done.returncode == 0:
            return env
        if "already in use" not in done.stderr or attempt == PORT_ATTEMPTS:
            print(done.stderr[-2000:], file=sys.stderr)  # what `eru up` said
            raise subprocess.CalledProcessError(done.returncode, [*command, *ports], done.stdout, done.stderr)
        print(f"soak: {done.stderr.strip().splitlines()[-1]}; other ports", file=sys.stderr)
    raise AssertionError("unreachable")


def stop_stack(state_dir: Path, env: dict[str, str]) -> None:
    """`eru down` (waits for every process)."""
    # its report goes to stderr: stdout carries only the bench's JSON lines
    subprocess.run(
        [sys.executable, "-m", "eru.cli", "down", "--state-dir", str(state_dir)],
        env=env,
        timeout=120,
        check=False,
        stdout=sys.stderr,
    )


async def soak(args: argparse.Namespace, state_dir: Path) -> dict[str, Any]:
    """Run the load and sample; returns the summary."""
    from eru import gc_tuning
    from eru.bus import connect
    from eru.stack.info import StackInfo

    info = StackInfo.load(state_dir)
    assert info is not None, "eru up wrote no stack.json"
    probe = Probe(info, state_dir)
    await probe.open()
    await probe.wait_for_nodes(args.sim_nodes, within=60)  # the first requests must find the pod and its nodes
    nc = await connect(info.nats_url, name="soak-client")
    load = Load(nc, args)
    await nc.subscribe("eru.deploy.*.*", cb=load.on_event)
    if load.tracer is not None:
        await load.tracer.attach(nc)
    # The client's own collections delayed the replies and events it timestamps: with CPython's defaults a full
    # collection every few seconds (100-350 ms), with a large young generation young ones of up to 200 ms (what it
    # keeps per deploy survives them all). For the load it runs without the cyclic collector (reference counting
    # still frees nearly everything; the few cycles wait for the end).
    gc_tuning.freeze_started()
    gc.disable()
    started = time.monotonic()
    load.until = started + args.duration
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):  # stop early but still drain, check and print the summary
        loop.add_signal_handler(signum, lambda: setattr(load, "until", time.monotonic()))
    samples: list[dict[str, Any]] = []

    async def sampler() -> None:
        while time.monotonic() < load.until:
            await asyncio.sleep(min(args.sample, max(0.0, load.until - time.monotonic())))
            sample = {
                "t": round(time.monotonic() - started, 1),
                "loadavg": [round(x, 2) for x in os.getloadavg()],
                **load.window(),
                "requests": load.requests,
                "accepted": load.accepted,
                "refused": load.refused,
                "live_target": args.live,
                "lost": load.lost(),
                **await probe.sample(),
            }
            if load.tracer is not None:
                sample["trace"] = load.tracer.window()
            samples.append(sample)
            print(json.dumps(sample), flush=True)

    try:
        await asyncio.gather(load.run(), sampler())
        drained = await probe.drain(load, within=120)
        final = await probe.final_checks()
    finally:
        gc.enable()
        await nc.close()
        await probe.close()
    return probe.summary(args, samples, load, drained, final)


def quiet_logging() -> None:
    """The client's own log lines (the bus library logs at debug; structlog unconfigured prints every level to
    stdout) go to stderr at warning and above: stdout carries only the bench's JSON lines."""
    from eru.logging import configure_logging

    configure_logging("bench", "soak", log_format="json", level="warning")


def main() -> None:
    quiet_logging()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=50.0, help="deploy requests per second")
    parser.add_argument("--live", type=int, default=3000, help="containers kept running (the oldest are removed)")
    parser.add_argument("--duration", type=float, default=1200.0, help="seconds of load")
    parser.add_argument("--retention", type=int, default=300, help="ERU_RETENTION_SECONDS of the stack")
    parser.add_argument("--log-max-bytes", type=parse_bytes, default=parse_bytes("10MiB"), help="ERU_LOG_MAX_BYTES")
    parser.add_argument("--sim-nodes", type=int, default=16)
    parser.add_argument("--sample", type=float, default=30.0, help="seconds per sample window")
    parser.add_argument("--state-dir", type=Path, default=None, help="default: a temporary directory")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info"],
        help="ERU_LOG_LEVEL of the stack (debug: a line per request and command, to exercise rotation)",
    )
    parser.add_argument("--trace", action="store_true", help="hop times per deploy (bench/soak_trace.py)")
    parser.add_argument("--keep", action="store_true", help="keep the state directory (logs, data) afterwards")
    args = parser.parse_args()
    state_dir = args.state_dir or Path(tempfile.mkdtemp(prefix="eru-soak-"))
    env = start_stack(args, state_dir)
    try:
        summary = asyncio.run(soak(args, state_dir))
    finally:
        stop_stack(state_dir, env)
        if not args.keep and args.state_dir is None:
            shutil.rmtree(state_dir, ignore_errors=True)
    print(json.dumps({"summary": summary}), flush=True)
    sys.exit(0 if summary["checks"]["all"] else 1)


if __name__ == "__main__":
    main()
