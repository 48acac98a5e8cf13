"""Where a deploy's time goes, hop by hop, read off the wire (issue 14, docs/performance.md "Tracing a request").

A tap (`Tap`, used by `bench_deploy.py --tap FILE`) subscribes to every subject of the bench's nats-server and
writes, per message, the time it was seen and the deploy ids (UUIDv7 text) its raw body or subject names. Nothing
is decoded while the bench runs (the tap must not slow it), and no service is changed: deploy ids appear verbatim
in msgpack bodies. The analysis (`python bench/trace_deploys.py FILE`) joins, per deploy:

- `sent`: the client published the request (the bench's own clock, written by `bench_deploy.py`);
- `planned_at`: the deploy id's own UUIDv7 time (ms): the allocator decided it (in its batch, under the lock);
- `reply`: the allocator's answer on the client's inbox (after the batch committed);
- `planned`: the outbox relay published its `planned` event;
- `command`: the first node command message naming it (relayed from the outbox);
- `event`: the first container event message naming it (the agent started it);
- `completed`: its terminal event (the allocator applied the agent's batch).

Two more points come from the messages' own `ce-time` header (the moment the sender made the message's envelope,
wall clock, microseconds): `ran`, when the agent had run the deploy's command and made its container event (before
publishing it), and `ended`, when the allocator's events batch had opened (marks, locks, reads) and made the deploy's
terminal event (before writing and committing it). They split the agent's hop (command → ran → event) and the
allocator's (event → ended → completed): waiting to be fetched, batched and locked before, writing, committing and
publishing after.

and prints p50/p99 of each hop in milliseconds, JSON. One process's timestamps (the tap's `perf_counter`), so the
hops add up; the UUIDv7 time is wall clock (ms) and is put on the same scale through the tap's wall/perf offset.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

UUID7 = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}")


class Tap:
    """Every message on the server with its time and the UUIDv7 ids in its subject and body (kept in memory)."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.rows: list[tuple[float, str, list[str], str | None]] = []
        self.offset = time.time() - time.perf_counter()  # wall = perf + offset

    async def start(self) -> None:
        """Subscribe to everything."""
        await self.nc.subscribe(">", cb=self._seen)
        await self.nc.flush()

    async def _seen(self, msg: Any) -> None:
        ids = [found.decode() for found in UUID7.findall(msg.data)]
        headers = msg.headers
        self.rows.append((time.perf_counter(), msg.subject, ids, headers.get("ce-time") if headers else None))

    def dump(self, path: Path, sent: dict[str, float]) -> None:
        """Write the rows and the client's send times (request envelope id → perf time) as JSON lines."""
        with path.open("w") as out:
            out.write(json.dumps({"offset": self.offset, "sent": sent}) + "\n")
            for row in self.rows:
                out.write(json.dumps(row) + "\n")


def uuid7_seconds(text: str) -> float:
    """The wall time (s) a UUIDv7 was made, to the millisecond."""
    return int(text.replace("-", "")[:12], 16) / 1000


def _row(row: list[Any]) -> tuple[float, str, list[str], str | None]:
    """A tap row; a trace written before `ce-time` was kept has three fields."""
    return (row[0], row[1], row[2], row[3] if len(row) > 3 else None)


def _perf(made: str, offset: float) -> float:
    """A `ce-time` header (RFC 3339, UTC) on the tap's `perf_counter` scale."""
    return datetime.fromisoformat(made.replace("Z", "+00:00")).timestamp() - offset


def analyse(path: Path) -> dict[str, Any]:
    """Per-hop p50/p99 (ms) over every deploy of the trace (see the module docstring)."""
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    offset, sent = head["offset"], head["sent"]
    first: dict[tuple[str, str], float] = {}  # (hop, id) → first time seen
    deploy_of_request: dict[str, str] = {}
    for line in lines[1:]:
        at, subject, ids, made = _row(json.loads(line))
        parts = subject.split(".")
        if subject.startswith("_INBOX.") and parts[-1] in sent:
            first.setdefault(("reply", parts[-1]), at)
            continue
        if subject.startswith("eru.deploy.") and len(parts) == 4:
            hop = "planned" if parts[3] == "planned" else "completed" if parts[3] == "completed" else ""
            if hop:
                first.setdefault((hop, parts[2]), at)
            if hop == "completed" and made is not None:
                first.setdefault(("ended", parts[2]), _perf(made, offset))
            continue
        if subject.startswith("eru.node.") and ".cmd." in subject:
            hop = "command"
        elif subject.startswith("eru.container."):
            hop = "event"
        else:
            continue
        for found in ids:
            first.setdefault((hop, found), at)
            if hop == "event" and made is not None:
                first.setdefault(("ran", found), _perf(made, offset))
    # a request's deploy: its reply (`accepted {deploy_id}`) names it
    for line in lines[1:]:
        at, subject, ids, _ = _row(json.loads(line))
        parts = subject.split(".")
        if subject.startswith("_INBOX.") and parts[-1] in sent and ids:
            deploy_of_request.setdefault(parts[-1], ids[0])
    hops: dict[str, list[float]] = {
        name: []
        for name in (
            "sent→decided",
            "decided→reply",
            "sent→reply",
            "decided→planned_event",
            "planned_event→command",
            "command→agent_event",
            "agent_event→completed",
            "command→agent_ran",
            "agent_ran→agent_event",
            "agent_event→batch_ended",
            "batch_ended→completed",
            "sent→completed",
        )
    }
    for key, at_sent in sent.items():
        deploy = deploy_of_request.get(key)
        if deploy is None:
            continue
        decided = uuid7_seconds(deploy) - offset
        reply = first.get(("reply", key))
        planned = first.get(("planned", deploy))
        command = first.get(("command", deploy))
        event = first.get(("event", deploy))
        completed = first.get(("completed", deploy))
        ran = first.get(("ran", deploy))
        ended = first.get(("ended", deploy))
        pairs = {
            "sent→decided": (at_sent, decided),
            "decided→reply": (decided, reply),
            "sent→reply": (at_sent, reply),
            "decided→planned_event": (decided, planned),
            "planned_event→command": (planned, command),
            "command→agent_event": (command, event),
            "agent_event→completed": (event, completed),
            "command→agent_ran": (command, ran),
            "agent_ran→agent_event": (ran, event),
            "agent_event→batch_ended": (event, ended),
            "batch_ended→completed": (ended, completed),
            "sent→completed": (at_sent, completed),
        }
        for name, (start, end) in pairs.items():
            if start is not None and end is not None:
                hops[name].append(end - start)
    return {
        name: {
            "n": len(values),
            "p50_ms": round(1000 * statistics.median(values), 1),
            "p99_ms": round(1000 * sorted(values)[max(0, round(0.99 * len(values)) - 1)], 1),
        }
        for name, values in hops.items()
        if values
    }


def main() -> None:
    """Print the per-hop figures of a trace written by `bench_deploy.py --tap FILE`."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("trace", type=Path)
    args = parser.parse_args()
    json.dump(analyse(args.trace), sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
