"""Finding every running replica of every eru service through the NATS micro-service protocol (`$SRV.STATS`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any


async def discover_services(nc: Any, *, wait_seconds: float = 1.0, prefix: str = "eru-") -> list[dict[str, Any]]:
    """Ask `$SRV.STATS` and collect every answer that arrives within `wait_seconds` seconds.

    Each answer becomes `{"service", "replica", "version", "id", "ready", "requests", "load"}`; services whose name does
    not start with `prefix` are ignored.
    """
    inbox = nc.new_inbox()
    answers: list[dict[str, Any]] = []
    subscription = await nc.subscribe(inbox)
    try:
        await nc.publish("$SRV.STATS", b"", reply=inbox)
        await nc.flush()
        deadline = asyncio.get_running_loop().time() + wait_seconds
        while (remaining := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                message = await subscription.next_msg(timeout=remaining)
            except TimeoutError:
                break
            try:
                answer = json.loads(message.data)
            except ValueError:
                continue
            name = str(answer.get("name", ""))
            if not name.startswith(prefix):
                continue
            data: dict[str, Any] = {}
            requests = 0
            for endpoint in answer.get("endpoints") or []:
                requests += int(endpoint.get("num_requests", 0))
                if isinstance(endpoint.get("data"), dict):
                    data.update(endpoint["data"])
            load = {k: v for k, v in data.items() if k not in ("replica", "ready")}
            answers.append(
                {
                    "service": name.removeprefix(prefix),
                    "replica": (answer.get("metadata") or {}).get("replica", answer.get("id")),
                    "version": answer.get("version", ""),
                    "id": answer.get("id", ""),
                    "ready": bool(data.get("ready", False)),
                    "requests": requests,
                    "load": ", ".join(f"{k}={v}" for k, v in sorted(load.items())),
                }
            )
    finally:
        await subscription.unsubscribe()
    return answers
