"""Finding every running replica of every eru service through the NATS micro-service protocol (`$SRV.STATS`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client


async def discover_services(nc: Client, *, wait_seconds: float = 1.0, prefix: str = "eru-") -> list[dict[str, Any]]:
    """Ask `$SRV.STATS` and collect every answer that arrives within `wait_seconds` seconds.

    Each answer becomes `{"service", "replica", "version", "id", "ready", "requests", "load", "stats", "metrics"}`
    (`load` the stats as text, integral numbers without a decimal point; `metrics` the replica's `/metrics` URL or
    None), and `watermarks` for an eviction replica that tells them (the watermarks its environment gives); services
    whose name does not start with `prefix` are ignored.
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
            metadata = answer.get("metadata") or {}
            answers.append(
                {
                    "service": name.removeprefix(prefix),
                    "replica": metadata.get("replica", answer.get("id")),
                    "version": answer.get("version", ""),
                    "id": answer.get("id", ""),
                    "ready": bool(data.get("ready", False)),
                    "requests": requests,
                    "load": ", ".join(f"{k}={_number(v)}" for k, v in sorted(load.items())),
                    "stats": {k: _integral(v) for k, v in sorted(load.items())},
                    "metrics": metadata.get("metrics"),
                    **({"watermarks": _json(metadata["watermarks"])} if "watermarks" in metadata else {}),
                }
            )
    finally:
        await subscription.unsubscribe()
    return answers


def _json(text: Any) -> Any:
    """A metadata value that holds JSON (an eviction replica's `watermarks`), None when it does not parse."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return None


def _integral(value: Any) -> Any:
    """Counters travel as floats in the stats; a whole number is shown and returned as an int."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _number(value: Any) -> str:
    value = _integral(value)
    return f"{value:g}" if isinstance(value, float) else str(value)
