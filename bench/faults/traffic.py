"""Deploy traffic through a fault and what became of every request (docs/reliability.md, "What is counted").

Each request is stored on the bus with a JetStream publish (its `Nats-Msg-Id` is the request id, so a client retry
is one request) and names an inbox in `Eru-Reply-To`; the outcome of each is read from what the client was told and
from the ledger once the stack has recovered:

* ok — accepted, and its deploy finished `completed` (or `partial`) in the ledger;
* error — the bus refused the publish (nats down), an error reply, or the deploy finished `failed`;
* lost — stored on the bus, yet no reply and no deploy in the ledger by the deadline;
* double — a request that placed more containers than it asked for.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from eru.bus import connect, new_envelope
from eru.bus.codec import decode_value, encode
from eru.bus.consumer import H_REPLY_TO
from eru.bus.publish import message_headers
from eru.bus.subjects import DEPLOY_REQUEST
from eru.domain import DeployRequest

POD = "default"


@dataclass
class Sent:
    """One request: its id, whether the bus stored it, and the reply the client got."""

    request_id: str
    stored: bool = False
    reply: dict[str, Any] | None = None
    refused: str = ""


@dataclass
class Traffic:
    """Requests sent so far on one connection, and the replies coming back."""

    nc: Any
    inbox: str
    sent: dict[str, Sent] = field(default_factory=dict)

    @classmethod
    async def open(cls, url: str) -> Traffic:
        """Connect (retrying while NATS is down: the client waits like a real one) and listen to the replies."""
        nc = await connect(url, name="faults-client", connect_timeout=5, max_reconnect_attempts=-1)
        inbox = nc.new_inbox()  # under the connection's own inbox prefix (access control allows only that one)
        traffic = cls(nc, inbox)
        await nc.subscribe(f"{inbox}.*", cb=traffic._on_reply)
        await nc.flush()
        return traffic

    async def _on_reply(self, msg: Any) -> None:
        request_id = msg.subject.rsplit(".", 1)[-1]
        entry = self.sent.get(request_id)
        if entry is None:
            return
        with contextlib.suppress(Exception):
            value = decode_value(msg.data, (msg.headers or {}).get("Content-Type"))
            entry.reply = value if isinstance(value, dict) else {"status": "unreadable"}

    async def send(
        self,
        count: int = 1,
        *,
        pod: str = POD,
        image: str = "busybox",
        command: list[str] | None = None,
        memory: str = "1MiB",
    ) -> Sent:
        """One deploy request of `count` small containers."""
        request_id = f"faults-{uuid.uuid4().hex}"
        entry = self.sent[request_id] = Sent(request_id)
        request = DeployRequest.model_validate(
            {
                "request_id": request_id,
                "pod": pod,
                "count": count,
                "workload": {
                    "name": "faults",
                    "image": image,
                    "command": command or [],
                    "resources": {"cpu_request": 0.01, "memory_request": memory},
                },
            }
        )
        envelope = new_envelope("eru.deploy.request", "faults", message_id=request_id)
        headers = {**message_headers(envelope), H_REPLY_TO: f"{self.inbox}.{request_id}"}
        try:
            ack = await self.nc.jetstream().publish(DEPLOY_REQUEST, encode(request), headers=headers, timeout=3.0)
            entry.stored = ack is not None
        except Exception as error:  # the bus refused or timed out: the client was told
            entry.refused = type(error).__name__
        return entry

    async def burst(self, total: int, seconds: float) -> None:
        """`total` requests spread over `seconds`."""
        gap = seconds / max(total, 1)
        tasks = []
        for _ in range(total):
            tasks.append(asyncio.create_task(self.send()))
            await asyncio.sleep(gap)
        await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(Exception):
            await self.nc.close()


OUTCOMES_SQL = """
SELECT d.request_id, d.status,
       (SELECT count(*) FROM containers c WHERE c.deploy_id = d.id AND c.replaces IS NULL) AS containers
  FROM deploys d WHERE d.request_id = ANY($1::text[])
"""
TERMINAL = ("completed", "partial", "failed")


async def settle_outcomes(traffic: Traffic, dsn: str, deadline_seconds: float) -> dict[str, Any]:
    """Wait until every stored request has an outcome (or the deadline), then count them."""
    import asyncpg

    ids = list(traffic.sent)
    deadline = time.monotonic() + deadline_seconds
    rows: dict[str, Any] = {}
    while True:
        with contextlib.suppress(Exception):
            conn = await asyncpg.connect(dsn, timeout=5)
            try:
                rows = {row["request_id"]: row for row in await conn.fetch(OUTCOMES_SQL, ids)}
            finally:
                await conn.close()
        pending = [
            e
            for e in traffic.sent.values()
            if e.stored
            and not _error_reply(e)
            and (e.request_id not in rows or rows[e.request_id]["status"] not in TERMINAL)
        ]
        if not pending or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    counts: dict[str, Any] = {"sent": len(ids), "ok": 0, "error": 0, "lost": 0, "double": 0, "refused_at_publish": 0}
    reasons: dict[str, int] = {}
    for entry in traffic.sent.values():
        row = rows.get(entry.request_id)
        if row is not None and row["containers"] > 1:
            counts["double"] += 1
        if entry.refused:
            counts["refused_at_publish"] += 1
            counts["error"] += 1
        elif _error_reply(entry) or (row is not None and row["status"] == "failed"):
            counts["error"] += 1
            reason = str((entry.reply or {}).get("message") or "deploy failed")[:120]
            reasons[reason] = reasons.get(reason, 0) + 1
        elif row is not None and row["status"] in ("completed", "partial"):
            counts["ok"] += 1
        else:
            counts["lost"] += 1
    counts["error_reasons"] = dict(sorted(reasons.items(), key=lambda item: -item[1])[:3])
    return counts


def _finished(rows: dict[str, Any], entry: Sent) -> bool:
    row = rows.get(entry.request_id)
    return row is not None and row["status"] in TERMINAL


def _error_reply(entry: Sent) -> bool:
    return entry.reply is not None and entry.reply.get("status") == "error"


async def deploys_flowing(url: str, within: float) -> float | None:
    """Seconds until a fresh one-container deploy completes (probing every half second), None if not within."""
    started = time.monotonic()
    traffic: Traffic | None = None
    try:
        async with asyncio.timeout(within):
            traffic = await Traffic.open(url)
            while True:
                probe = await traffic.send()
                until = time.monotonic() + 5.0
                while time.monotonic() < until:
                    if probe.reply is not None and probe.reply.get("status") == "accepted":
                        return time.monotonic() - started
                    await asyncio.sleep(0.1)
    except TimeoutError:
        return None
    finally:
        if traffic is not None:
            await traffic.close()
