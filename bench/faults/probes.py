"""Permission probes: the `client` user of a tenant tries every `$JS.API`, operator and node subject; every probe
must be denied by the server (docs/security.md)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import nats
from bench.faults.stack import FaultStack, eru

from eru.bus.streams import default_streams

TENANT = "faults-probe"
DURABLES = ("allocator-deploy", "allocator-container-events", "allocator-registrations", "node-agent-sim-001")
OPERATOR_VERBS = (
    "set-node",
    "cordon",
    "pod-create",
    "tenant-create",
    "tenant-set",
    "tenant-rm",
    "tenant-ls",
    "reconcile",
    "query",
    "remove",
    "realloc",
    "replace",
)


def publish_probes(node: str) -> list[str]:
    """Subjects a client must not publish to."""
    subjects = ["$JS.API.STREAM.LIST", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.CREATE.FAULTS"]
    for spec in default_streams():
        stream = spec.name
        subjects += [
            f"$JS.API.STREAM.{verb}.{stream}" for verb in ("INFO", "DELETE", "PURGE", "UPDATE", "MSG.GET", "MSG.DELETE")
        ]
        subjects += [f"$JS.API.CONSUMER.{verb}.{stream}" for verb in ("LIST", "NAMES")]
        subjects.append(f"$JS.API.CONSUMER.CREATE.{stream}.faults")
        for durable in DURABLES:
            subjects += [
                f"$JS.API.CONSUMER.{verb}.{stream}.{durable}" for verb in ("DELETE", "MSG.NEXT", "INFO", "CREATE")
            ]
            subjects.append(f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{durable}")
    subjects += [f"eru.allocator.{verb}" for verb in OPERATOR_VERBS]
    subjects += ["eru.dlq.eru.deploy.request", "eru.distributor.place", "eru.deploy.request"]
    subjects += [
        f"eru.node.{node}.cmd.create",
        f"eru.node.{node}.cmd.batch",
        f"eru.node.{node}.registered",
        f"eru.node.{node}.heartbeat",
        f"eru.node.{node}.inventory",
        f"eru.node.{node}.condition",
        f"eru.container.{node}.removed",
        f"eru.container.{node}.batch",
        f"eru.metrics.{node}",
        f"eru.eviction.{node}",
        f"eru.heartbeats.{node}",
        f"eru.inventories.{node}",
    ]
    return subjects


SUBSCRIBE_PROBES = ("eru.node.>", "eru.container.>", "eru.metrics.>", "eru.deploy.>", "eru.>", "_INBOX.>", "$JS.>", ">")
VIOLATION = re.compile(r"permissions violation for (publish|subscription) to \"?([^\"\s]+)", re.IGNORECASE)


def client_url(stack: FaultStack) -> str | None:
    """A client URL for a fresh tenant (`eru tenant create --credentials` / `eru tenant credentials`), or None."""
    state = ["--state-dir", str(stack.state_dir)]
    eru("tenant", "create", TENANT, *state)
    done = eru("tenant", "credentials", TENANT, *state)
    if done.returncode != 0:
        return None
    match = re.search(r"(nats|tls)://\S+", done.stdout)
    return match.group(0) if match else None


async def probe(stack: FaultStack, node: str) -> dict[str, Any]:
    """Every probe, sent as the client user; what the server denied and what it let through."""
    url = client_url(stack)
    if url is None:
        return {"skipped": "no client credentials: `eru tenant credentials` is not available on this build"}
    denied: set[tuple[str, str]] = set()

    async def on_error(error: Exception) -> None:
        found = VIOLATION.search(str(error))
        if found:
            # nats-py lowercases the server's message, subjects included: compare in lower case
            denied.add(("publish" if found.group(1).lower() == "publish" else "subscribe", found.group(2).lower()))

    nc = await nats.connect(url, name="faults-probe", connect_timeout=10, error_cb=on_error, allow_reconnect=False)
    publishes = publish_probes(node)
    try:
        for subject in publishes:
            await nc.publish(subject, b"{}")
        for subject in SUBSCRIBE_PROBES:
            with contextlib.suppress(Exception):
                await nc.subscribe(subject)
        await nc.flush()
        await asyncio.sleep(2.0)
    finally:
        with contextlib.suppress(Exception):
            await nc.close()
    allowed = [f"publish {s}" for s in publishes if ("publish", s.lower()) not in denied]
    allowed += [f"subscribe {s}" for s in SUBSCRIBE_PROBES if ("subscribe", s.lower()) not in denied]
    total = len(publishes) + len(SUBSCRIBE_PROBES)
    return {"probes": total, "denied": total - len(allowed), "allowed": allowed}
