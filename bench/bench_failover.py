"""Failover recovery over many rounds, both scenarios of docs/deploy.md "Failover over many rounds".

* `cluster`: `eru up --nats-cluster 3` (one allocator, 8 sim nodes); each round kills -9 the nats-server leading
  ERU_DEPLOY; its supervisor starts it again.
* `compose`: the compose stack of an already built image (`--image`, default eru:latest; not rebuilt here); each
  round `docker kill`s the nats-server leading ERU_DEPLOY and the allocator replica leasing pod default's partition,
  then starts both again.

A round: one client (listing every server, a survivor first) sends `--total` single-container deploys at `--rate`/s
and the victims are killed once `--kill-after` answers came back; a watcher polls every 0.1 s from a survivor and
timestamps what happens after the kill: ERU_DEPLOY's new leader, the intake consumer's new leader, the partition
lease gone and taken (compose). Recovered: the first answer after the longest silence following the kill from which
answers flow at half the rate of the 5 s before the kill over the next 5 s (`eru.testing.cluster_failover.
recovered_at`, the failover tests' rule). Also: requests lost (never answered or not in the ledger), doubled (a request
with two deploys or a deploy with other than one container) and usage invariant violations. Between rounds it
waits until every stream has its three servers current again (and, compose, both allocators hold leases again).

Prints one JSON object: every round, and min/median/p90/max of the recovery seconds with the load average.

Usage: .venv/bin/python -m bench.bench_failover --scenario cluster|compose [--rounds 10] [--total 1000] [--rate 50]
       [--kill-after 300] [--image eru:latest] [--ack-wait 2,0.5 (alternating per round)]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
from bench.faults.checks import invariant_violations

from eru.bus import connect
from eru.bus.connection import split_urls
from eru.bus.leases import partition_of
from eru.bus.streams import DEPLOY, default_streams
from eru.bus.subjects import DEPLOY_REQUEST
from eru.testing.asking import PUBLISH_ACK_SECONDS
from eru.testing.cluster_failover import WINDOW, Client, longest_silence, per_second, recovered_at
from eru.testing.cluster_stack import ClusterStack

LEASE_BUCKET = "eru_allocator_leases"  # eru_allocator.intake.routing.LEASE_BUCKET (services are not imported by bench/)
PARTITIONS = 16
POD = "default"
LEDGER_SQL = """
SELECT d.request_id, (SELECT count(*) FROM containers c WHERE c.deploy_id = d.id AND c.replaces IS NULL) AS n
  FROM deploys d WHERE d.request_id = ANY($1::text[])
"""


@dataclass
class Target:
    """How a scenario is driven: its URLs, who to kill and how, how to bring the victims back."""

    operator_url: str
    client_url: str
    dsn: str
    subject: str  # where the client publishes
    key_prefix: str  # how the ledger keys the client's request ids (a tenant's: `<tenant>/`)
    intake: str  # the intake consumer of those requests
    kill: Callable[[list[str]], None]
    restore: Callable[[list[str]], None]
    kill_owner: bool  # also kill the allocator leasing the pod's partition


def ordered(urls: list[str], victim: str) -> str:
    """All servers, the victim (`nats-<i>`, the i-th URL) last: the client's replies keep coming while it dies."""
    index = int(victim.rsplit("-", 1)[1]) - 1
    return ",".join([*urls[index + 1 :], *urls[:index], urls[index]])


async def lease_owners(js: Any) -> dict[str, str]:
    """Partition lease → owning replica, as the lease bucket says now."""
    kv = await js.key_value(LEASE_BUCKET)
    owners = {}
    for partition in range(PARTITIONS):
        with contextlib.suppress(Exception):
            entry = await kv.get(f"p.{partition}")
            if entry.value:
                owners[f"p.{partition}"] = entry.value.decode()
    return owners


async def settled(target: Target, within: float = 180.0) -> bool:
    """Wait until every stream has a leader and both followers current (and, compose, two replicas hold leases);
    False when that did not happen within `within` (the round runs anyway and says so)."""
    names = [spec.name for spec in default_streams()]
    deadline = time.monotonic() + within
    nc = await connect(target.operator_url, name="failover-bench-check", connect_timeout=10)
    try:
        js = nc.jetstream(timeout=2.0)
        while time.monotonic() < deadline:
            ready = True
            for name in names:
                try:
                    cluster = (await js.stream_info(name)).cluster
                except Exception:
                    ready = False
                    break
                replicas = (cluster.replicas or []) if cluster else []
                if cluster is None or not cluster.leader or len(replicas) < 2 or not all(r.current for r in replicas):
                    ready = False
                    break
            if ready and target.kill_owner:
                try:
                    owners = await lease_owners(js)
                except Exception:  # a loaded machine: JetStream answers late, ask again
                    owners = {}
                ready = len(owners) == PARTITIONS and len(set(owners.values())) >= 2
            if ready:
                return True
            await asyncio.sleep(1.0)
        return False
    finally:
        await nc.close()


async def watch(target: Target, url: str, victims: list[str], killed: asyncio.Event, marks: dict[str, float]) -> None:
    """Timestamps (seconds after the kill) of what the failover goes through, polled every 0.1 s."""
    nc = await connect(url, name="failover-bench-watch", connect_timeout=10, dont_randomize=True)
    js = nc.jetstream(timeout=1.0)
    kv = await js.key_value(LEASE_BUCKET) if target.kill_owner else None
    key = f"p.{partition_of(POD, PARTITIONS)}"
    try:
        await killed.wait()
        start = marks["killed"]
        while time.monotonic() - start < 60 and not {"stream_leader", "consumer_leader", "lease_taken"} <= set(marks):
            now = time.monotonic() - start
            with contextlib.suppress(Exception):
                cluster = (await js.stream_info(DEPLOY)).cluster
                leader = cluster.leader if cluster else None
                if leader and leader != victims[0]:
                    marks.setdefault("stream_leader", now)
            with contextlib.suppress(Exception):
                leader = (await js.consumer_info(DEPLOY, target.intake, timeout=1.0)).cluster.leader
                if leader and leader != victims[0]:
                    marks.setdefault("consumer_leader", now)
            if kv is None:
                marks.setdefault("lease_taken", -1.0)
            else:
                try:
                    owner = (await kv.get(key)).value
                    if owner and owner.decode() != victims[1]:
                        marks.setdefault("lease_taken", now)
                except Exception as error:  # gone (expired or deleted), or the bucket is electing
                    if "not found" in str(error).lower() or type(error).__name__ == "KeyNotFoundError":
                        marks.setdefault("lease_gone", now)
            await asyncio.sleep(0.1)
    finally:
        await nc.close()


async def one_round(
    target: Target, total: int, rate: float, kill_after: int, ack_wait: float = PUBLISH_ACK_SECONDS
) -> dict[str, Any]:
    """One failover under a burst, the client waiting `ack_wait` seconds for each publish's acknowledgement; its
    timeline and checks."""
    urls = split_urls(target.operator_url)
    probe = await connect(target.operator_url, name="failover-bench-check", connect_timeout=10)
    try:
        js = probe.jetstream(timeout=2.0)
        cluster = (await js.stream_info(DEPLOY)).cluster
        if cluster is None or not cluster.leader:
            raise RuntimeError("ERU_DEPLOY has no leader: is this a cluster?")
        victims = [str(cluster.leader)]
        if target.kill_owner:
            victims.append((await lease_owners(js))[f"p.{partition_of(POD, PARTITIONS)}"])
    finally:
        await probe.close()
    nc = await connect(
        ordered(split_urls(target.client_url), victims[0]), name="failover-bench-client", dont_randomize=True
    )
    client = Client(nc, nc.new_inbox(), total=total, kill_after=kill_after, subject=target.subject, ack_wait=ack_wait)
    await nc.subscribe(f"{client.inbox}.*", cb=client.on_reply)
    await nc.flush()
    marks: dict[str, float] = {}
    killed = asyncio.Event()
    watcher = asyncio.create_task(watch(target, ordered(urls, victims[0]), victims, killed, marks))

    async def kill_when_due() -> None:
        await client.kill_point.wait()
        marks["killed"] = time.monotonic()
        killed.set()
        await asyncio.to_thread(target.kill, victims)

    killer = asyncio.create_task(kill_when_due())
    started = time.monotonic()
    sending = []
    for sent in range(total):
        sending.append(asyncio.create_task(client.send()))
        await asyncio.sleep(max(0.0, started + (sent + 1) / rate - time.monotonic()))
    await asyncio.gather(*sending)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(client.all_answered.wait(), timeout=180)
    await client.close()
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        await asyncio.wait_for(watcher, timeout=60)
    killer.cancel()
    if "killed" not in marks:
        raise RuntimeError(f"only {len(client.answers)} answers: the kill point was never reached")
    killed_at = marks.pop("killed")
    times = sorted(client.answered_at.values())
    before = per_second(times, killed_at - WINDOW, killed_at)
    loaded_until = times[int(len(times) * 0.95)]
    # the rule of the failover tests: a window from an answer before the 95 % point counts every later answer, so
    # the backlog of the pause cleared in one burst after the sending ended is the recovery
    recovered = recovered_at(times, killed_at, loaded_until, statistics.mean(before) if before else 0.0)
    silence = longest_silence(times, killed_at)
    keys = [f"{target.key_prefix}{rid}" for rid in client.sent_at]
    conn = await asyncpg.connect(target.dsn, timeout=10)
    try:
        rows = await conn.fetch(LEDGER_SQL, keys)
    finally:
        await conn.close()
    deploys: dict[str, list[int]] = {}
    for row in rows:
        deploys.setdefault(str(row["request_id"]), []).append(int(row["n"]))
    lost = sum(1 for rid in client.sent_at if rid not in client.answers or f"{target.key_prefix}{rid}" not in deploys)
    doubled = sum(1 for counts in deploys.values() if counts != [1])
    await asyncio.to_thread(target.restore, victims)
    return {
        "victims": victims,
        "ack_wait": ack_wait,
        "recovered_seconds": None if recovered is None else round(recovered, 2),
        "silence_seconds": [round(silence[0], 2), round(silence[1], 2)],
        **{f"{name}_seconds": round(value, 2) for name, value in sorted(marks.items()) if value >= 0},
        "per_second_before": before,
        "per_second_after": per_second(times, killed_at, min(loaded_until, killed_at + 20)),
        "answered": len(client.answers),
        "answered_twice": sum(1 for replies in client.answers.values() if len(replies) > 1),
        "publish_retries": client.publish_retries,
        "asked_again": client.asked_again,
        "lost": lost,
        "doubled": doubled,
        "violations": len(await invariant_violations(target.dsn)),
        "load_average": round(os.getloadavg()[0], 1),
    }


def cluster_target(stack: ClusterStack) -> Target:
    """`eru up --nats-cluster 3`: kill -9 a server; its supervisor starts it again."""
    info = stack.info()

    def kill(victims: list[str]) -> None:
        os.kill(stack.info().server_pids[victims[0]], signal.SIGKILL)

    def restore(victims: list[str]) -> None:
        old = info.server_pids[victims[0]]
        stack.wait(lambda: stack.info().server_pids[victims[0]] != old, 60, f"{victims[0]} to be restarted")
        info.server_pids[victims[0]] = stack.info().server_pids[victims[0]]

    return Target(info.nats_url, info.nats_url, info.database_dsn, DEPLOY_REQUEST, "", "allocator-deploy", kill,
                  restore, kill_owner=False)  # fmt: skip


def compose_target(stack: Any) -> Target:
    """The compose stack: `docker kill` the server and the partition's owner, `docker start` them after."""
    env = stack.client_env()

    def kill(victims: list[str]) -> None:
        for victim in victims:
            stack.kill(victim)

    def restore(victims: list[str]) -> None:
        for victim in victims:
            stack.start(victim)
        waiting = stack.wait_healthy(victims, 180.0)
        if waiting:
            raise RuntimeError(f"not healthy again: {waiting}")

    return Target(env["ERU_BUS_URL"], env["ERU_CLIENT_URL"], env["ERU_DATABASE_URL"],
                  f"eru.t.{POD}.deploy.request", f"{POD}/", "allocator-tenant-deploy", kill, restore,
                  kill_owner=True)  # fmt: skip


def summaries(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The summary of all rounds, and of each client publish-ack wait's rounds when they alternated."""
    waits = sorted({r["ack_wait"] for r in rounds})
    if len(waits) == 1:
        return summary(rounds)
    return {f"ack_wait_{wait:g}": summary([r for r in rounds if r["ack_wait"] == wait]) for wait in waits}


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """min/median/p90/max of the recovery seconds (a round that never recovered counts as infinite) and totals."""
    seconds = sorted(r["recovered_seconds"] if r["recovered_seconds"] is not None else float("inf") for r in rounds)
    p90 = seconds[min(len(seconds) - 1, round(0.9 * (len(seconds) - 1)))]
    return {
        "rounds": len(rounds),
        "recovered_seconds": {
            "min": seconds[0],
            "median": round(statistics.median(seconds), 2),
            "p90": p90,
            "max": seconds[-1],
        },
        "within_10_s": sum(1 for s in seconds if s <= 10.0),
        "lost": sum(r["lost"] for r in rounds),
        "doubled": sum(r["doubled"] for r in rounds),
        "violations": max(r["violations"] for r in rounds),
        "load_average": [min(r["load_average"] for r in rounds), max(r["load_average"] for r in rounds)],
    }


async def run_rounds(target: Target, args: argparse.Namespace) -> list[Any]:
    """`--rounds` failovers on one stack, each after the stack settled."""
    rounds = []
    waits = itertools.cycle(float(wait) for wait in args.ack_wait.split(","))
    for number in range(args.rounds):
        calm = await settled(target)
        figures = {
            "settled_before": calm,
            **await one_round(target, args.total, args.rate, args.kill_after, next(waits)),
        }
        print(json.dumps({"round": number + 1, **figures}), flush=True)
        rounds.append(figures)
    return rounds


def main() -> None:
    """Run the rounds of one scenario and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=["cluster", "compose"], required=True)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--total", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50.0)
    parser.add_argument("--kill-after", type=int, default=300)
    parser.add_argument("--image", default=os.environ.get("ERU_COMPOSE_IMAGE", "eru:latest"))
    parser.add_argument(
        "--ack-wait",
        default=f"{PUBLISH_ACK_SECONDS:g}",
        help="seconds the client waits for a publish's acknowledgement; a comma list alternates per round (A/B)",
    )
    args = parser.parse_args()
    load = os.getloadavg()[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False)
    with tempfile.TemporaryDirectory(prefix="eru-failover-bench-") as directory:
        if args.scenario == "cluster":
            # 64 cores a node: ten rounds of 1,000 containers of 0.01 cores fit without removing any
            stack = ClusterStack(Path(directory) / "state", 8, ("--sim-node-cpus", "64", "--sim-node-memory", "64GiB"))
            try:
                stack.up()
                rounds = asyncio.run(run_rounds(cluster_target(stack), args))
            finally:
                stack.force_cleanup()
        else:
            os.environ["ERU_COMPOSE_IMAGE"] = args.image
            from eru.testing.compose_stack import ComposeStack  # reads ERU_COMPOSE_IMAGE on import

            compose = ComposeStack.create(Path(directory))
            try:
                compose.up()
                rounds = asyncio.run(run_rounds(compose_target(compose), args))
            finally:
                with contextlib.suppress(AssertionError):
                    compose.down()
                compose.force_remove()
    print(
        json.dumps(
            {
                "scenario": args.scenario,
                "commit": commit.stdout.strip(),
                "image": args.image if args.scenario == "compose" else None,
                "load_average_at_start": round(load, 1),
                **summaries(rounds),
                "per_round": rounds,
            }
        )
    )


if __name__ == "__main__":
    main()
