"""The fuzz as a plain client (docs/reliability.md, docs/security.md): the `client` user of a fresh tenant sends
fuzzed messages on every subject it may publish (`eru.t.<tenant>.deploy.request`, `eru.t.<tenant>.allocator.
{remove,realloc,replace,query}`): random bytes, 1,000/10,000-level nesting, 10 MB bodies, wrong types, absurd values,
strings no one can write (lone surrogates, bytes that are not UTF-8, overlong: bad_strings.py) and well-typed
requests naming OTHER tenants' containers, deploys and tenant (their real ids, read from the ledger).

What must hold: every request answered (an error naming the field for what is not the sender's or not text, never a
handler error or a traceback), every message settled, nothing of any other tenant changed (each of their live
containers keeps its state and allocation), and no answer holds another tenant's container id.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from typing import Any

import asyncpg
from bench.faults.bad_strings import JSON, MSGPACK, spoiled_body
from bench.faults.checks import handler_failure
from bench.faults.fuzz import BIG
from bench.faults.probes import client_url
from bench.faults.stack import FaultStack

from eru.bus import connect, new_envelope
from eru.bus.consumer import H_REPLY_TO
from eru.bus.publish import message_headers
from eru.bus.subjects import tenant_deploy_request, tenant_operation

TENANT = "faults-probe"  # the probes' tenant: one set of client credentials per stack
KINDS = ("bytes", "deep_json", "deep_msgpack", "wrong_types", "absurd", "bad_strings", "foreign", "foreign", "foreign")
VICTIMS_SQL = """
SELECT c.id, c.state, c.allocation::text AS allocation, c.deploy_id
  FROM containers c
 WHERE c.tenant IS DISTINCT FROM $1 AND c.state NOT IN ('removed', 'failed', 'lost')
 ORDER BY c.id
"""


def _foreign(operation: str, rng: random.Random, containers: list[str], deploys: list[str]) -> dict[str, Any]:
    """A well-typed request that names another tenant's things."""
    theirs = rng.choice(containers) if containers else "no-such-container"
    if operation == "deploy":
        workload: dict[str, Any] = {
            "name": "faults",
            "image": "busybox",
            "tenant": rng.choice(["default", "faults-victim", "ops"]),
        }
        workload["resources"] = {"cpu_request": 0.01, "memory_request": "1MiB"}
        return {"pod": "default", "count": 1, "workload": workload, "request_id": rng.choice(deploys or ["r"])}
    if operation == "remove":
        return {"container_ids": rng.sample(containers, k=min(len(containers), rng.randint(1, 3))) or [theirs]}
    if operation == "realloc":
        return {"container_ids": [theirs], "memory_request": rng.choice([1, 2**40, 64 * 2**20])}
    if operation == "replace":
        return {"container_id": theirs, "image": "busybox", "command": ["sh", "-c", "echo owned"]}
    what = rng.choice(["containers", "deploy", "deploys", "nodes", "pods"])
    return {"what": what, "deploy_id": rng.choice(deploys or ["d"]), "container_id": theirs, "pod": "default"}


def _body(
    kind: str, operation: str, rng: random.Random, containers: list[str], deploys: list[str]
) -> tuple[bytes, str]:
    """(body, content type) of one fuzzed request."""
    if kind == "bytes":
        return rng.randbytes(rng.randint(1, 2000)), JSON
    if kind == "deep_json":
        depth = rng.choice([1_000, 10_000])
        return ("[" * depth + "]" * depth).encode(), JSON
    if kind == "deep_msgpack":
        return b"\x91" * 10_000 + b"\xc0", MSGPACK
    if kind == "big":
        return b"{" + b" " * BIG + b"}", JSON
    value = _foreign(operation, rng, containers, deploys)
    if kind == "bad_strings":
        body, content_type, _style = spoiled_body(value, rng)
        return body, content_type
    if kind == "wrong_types":
        for key in rng.sample(sorted(value), k=max(1, len(value) // 2)):
            value[key] = rng.choice([[1, 2], {"x": 1}, "wrong", 3.5, True, None])
    elif kind == "absurd":
        value = {k: (2**62 if isinstance(v, int | float) and not isinstance(v, bool) else v) for k, v in value.items()}
    return json.dumps(value).encode(), JSON


async def _victims(dsn: str) -> list[tuple[str, str, str, str]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [(row[0], row[1], row[2], row[3]) for row in await conn.fetch(VICTIMS_SQL, TENANT)]
    finally:
        await conn.close()


async def client_fuzz(stack: FaultStack, total: int, seed: int = 13, big_limit: int = 5) -> dict[str, Any]:
    """Send `total` fuzzed messages as a tenant's client; count answers and what changed for other tenants."""
    url = await asyncio.to_thread(client_url, stack)
    if url is None:
        return {"skipped": "no client credentials (`eru tenant credentials`)"}
    before = await _victims(stack.dsn)
    containers = [row[0] for row in before]
    deploys = sorted({row[3] for row in before if row[3]})
    rng = random.Random(seed)
    nc = await connect(url, name="faults-client-fuzz", connect_timeout=10)
    inbox = nc.new_inbox()
    answers: dict[str, bool] = {}  # key → answered ok (False: with an error)
    all_answered = asyncio.Event()
    bodies: list[bytes] = []  # the ok answers: none may hold another tenant's container id
    keys: list[str] = []
    counts = {"sent": 0, "refused_by_bus": 0, "answered_ok": 0, "answered_error": 0, "unanswered": 0}
    bugs: dict[str, str] = {}  # key → the handler error / traceback it was answered with
    sent_as: dict[str, str] = {}  # key → "<operation> <kind>"
    by_kind: dict[str, int] = {}

    async def on_reply(msg: Any) -> None:
        key = msg.subject.rsplit(".", 1)[-1]
        headers = msg.headers or {}
        if not headers.get("ce-id") and b'"stream"' in msg.data[:200] and b'"seq"' in msg.data[:200]:
            return  # the stream's ack of a stored deploy request, not the answer
        answers[key] = headers.get("Eru-Status") != "error" and b"error" not in msg.data[:64]
        failure = handler_failure(msg.data, headers)
        if failure is not None:
            bugs[key] = failure
        if answers[key]:
            bodies.append(msg.data)
        if sent_all and len(answers) >= len(keys):
            all_answered.set()

    await nc.subscribe(f"{inbox}.*", cb=on_reply)
    operations = ("deploy", "remove", "realloc", "replace", "query")
    started = time.monotonic()
    sent_all = False

    async def one(index: int) -> None:
        operation = operations[index % len(operations)]
        kind = rng.choice(KINDS)
        if big_limit and index % max(1, total // big_limit) == 1:
            kind = "big"
        by_kind[kind] = by_kind.get(kind, 0) + 1
        body, content_type = _body(kind, operation, rng, containers, deploys)
        sent_as[f"c{index}"] = f"{operation} {kind}"
        subject = tenant_deploy_request(TENANT) if operation == "deploy" else tenant_operation(TENANT, operation)
        key = f"c{index}"
        envelope = new_envelope("eru.fuzz", "faults-client-fuzz", message_id=f"client-fuzz-{seed}-{index}")
        headers = {**message_headers(envelope, content_type), H_REPLY_TO: f"{inbox}.{key}"}
        counts["sent"] += 1
        try:
            await nc.publish(subject, body, reply=f"{inbox}.{key}", headers=headers)
        except Exception:  # the client library refused it (max payload)
            counts["refused_by_bus"] += 1
            return
        keys.append(key)

    for first in range(0, total, 100):
        await asyncio.gather(*(one(i) for i in range(first, min(first + 100, total))))
        await nc.flush(timeout=10)
    sent_all = True
    if len(answers) < len(keys):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_answered.wait(), 60.0)
    for key in keys:
        if key not in answers:
            counts["unanswered"] += 1
        elif answers[key]:
            counts["answered_ok"] += 1
        else:
            counts["answered_error"] += 1
    with contextlib.suppress(Exception):
        await nc.close()
    after = {row[0]: row for row in await _victims(stack.dsn)}
    changed = [row[0] for row in before if after.get(row[0]) != row]
    leaked = sum(1 for body in bodies if any(c.encode() in body for c in containers))
    return {
        **counts,
        "other_tenants_containers": len(before),
        "other_tenants_changed": len(changed),
        "changed_examples": changed[:3],
        "other_tenants_leaked": leaked,
        "handler_errors": len(bugs),  # answers that report a bug: the target is 0
        "handler_error_examples": sorted({f"{sent_as.get(key, key)}: {why}" for key, why in bugs.items()})[:5],
        "by_kind": by_kind,
        "seconds": round(time.monotonic() - started, 1),
    }
