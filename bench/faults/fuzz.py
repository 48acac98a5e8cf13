"""Fuzzed messages on every public subject of the catalog (docs/subjects.md): random bytes, deep nesting, 10 MB
bodies, wrong types, absurd but well-typed values, and well-typed values whose strings no one can write (lone surrogates
as `\\ud800` escapes, bytes that are not UTF-8 in JSON and msgpack strings, strings far above their limit:
bad_strings.py). Well-typed messages name only `fuzz-*` nodes, pods, tenants
and containers, so that what they legitimately change (a fuzz node registered, a fuzz tenant created) touches none
of the stack's own work; what must hold is that every message is settled and the stack keeps serving."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from typing import Any

import nats.errors
from bench.faults.bad_strings import spoiled_body
from bench.faults.checks import handler_failure

from eru.bus import connect, new_envelope
from eru.bus.catalog import CATALOG, SubjectEntry
from eru.bus.consumer import H_REPLY_TO
from eru.bus.publish import message_headers

BIG = 10 * 1024 * 1024
KINDS = ("bytes", "deep_json", "deep_msgpack", "wrong_types", "absurd", "bad_strings", "bad_strings", "big")
PLACEHOLDERS = {
    "<node>": "fuzz-node",
    "<deploy_id>": "fuzz-deploy",
    "<event>": "started",
    "<command>": "create",
    "<n>": "0",  # a partition some replica leases (docs/replicas.md); see /work/notes/requests.md for unleased ones
}


def subject_of(entry: SubjectEntry, rng: random.Random, nodes: list[str]) -> str:
    """A concrete subject of a catalog entry; raw bodies may go to real nodes, well-typed ones to fuzz nodes."""
    subject = entry.subject
    for placeholder, value in PLACEHOLDERS.items():
        if placeholder == "<node>" and nodes and rng.random() < 0.5:
            value = rng.choice(nodes)
        subject = subject.replace(placeholder, value)
    return subject


def _sample(schema: Any, defs: dict[str, Any], rng: random.Random, absurd: bool, depth: int = 0) -> Any:
    """A value of a JSON schema: ordinary, or with extreme numbers and long strings."""
    if not isinstance(schema, dict) or depth > 6:
        return None
    if "$ref" in schema:
        return _sample(defs[schema["$ref"].rsplit("/", 1)[-1]], defs, rng, absurd, depth + 1)
    if "anyOf" in schema:
        options = [o for o in schema["anyOf"] if o.get("type") != "null"] or schema["anyOf"]
        return _sample(rng.choice(options), defs, rng, absurd, depth + 1)
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type")
    if kind == "object":
        if "properties" in schema:
            return {k: _sample(v, defs, rng, absurd, depth + 1) for k, v in schema["properties"].items()}
        values = schema.get("additionalProperties", {"type": "string"})
        return {f"fuzz-{i}": _sample(values, defs, rng, absurd, depth + 1) for i in range(rng.randint(0, 3))}
    if kind == "array":
        return [_sample(schema.get("items", {}), defs, rng, absurd, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "integer":
        return rng.choice([2**62, -(2**62), 10**9, 0]) if absurd else rng.randint(0, 3)
    if kind == "number":
        return rng.choice([1e300, -1e300, 1e-300, 123456789.5]) if absurd else 0.5
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "string":
        limit = int(schema.get("maxLength", 120))
        return ("fuzz-" + "x" * (limit - 5)) if absurd else f"fuzz-{rng.randint(0, 9999)}"
    return None


def body_of(kind: str, entry: SubjectEntry, rng: random.Random) -> tuple[bytes, str]:
    """(body, content type) of one fuzzed message."""
    if kind == "bytes":
        return rng.randbytes(rng.randint(1, 2000)), "application/msgpack"
    if kind == "deep_json":
        depth = rng.choice([1_000, 10_000])
        return ("[" * depth + "]" * depth).encode(), "application/json"
    if kind == "deep_msgpack":
        return b"\x91" * 10_000 + b"\xc0", "application/msgpack"
    if kind == "big":
        return b"{" + b" " * BIG + b"}", "application/json"
    schema = entry.model.model_json_schema()
    value = _sample(schema, schema.get("$defs", {}), rng, absurd=kind == "absurd")
    if kind == "bad_strings":
        body, content_type, _style = spoiled_body(value, rng)
        return body, content_type
    if kind == "wrong_types" and isinstance(value, dict) and value:
        for key in rng.sample(sorted(value), k=max(1, len(value) // 2)):
            value[key] = rng.choice([[1, 2], {"x": 1}, "wrong", 3.5, True, None])
    return json.dumps(value).encode(), "application/json"


async def late_answers(answered: dict[str, bool], request_keys: set[str], quiet_seconds: float = 5.0) -> None:
    """Wait for the answers of requests stored on a stream: until every request is answered, or none has come for
    `quiet_seconds` (a loaded stack answers late but steadily; a fixed 5 s wait counted late answers as lost)."""
    loop = asyncio.get_running_loop()
    seen, last = -1, loop.time()
    while True:
        count = sum(1 for key in answered if key in request_keys)
        if count >= len(request_keys):
            return
        if count != seen:
            seen, last = count, loop.time()
        elif loop.time() - last >= quiet_seconds:
            return
        await asyncio.sleep(0.1)


async def fuzz(url: str, total: int, nodes: list[str], seed: int = 13, big_limit: int = 10) -> dict[str, Any]:
    """Send `total` fuzzed messages over every catalog subject; count what the bus refused and what was answered."""
    rng = random.Random(seed)
    nc = await connect(url, name="faults-fuzz", connect_timeout=10)
    js = nc.jetstream()
    counts = {"sent": 0, "refused_by_bus": 0, "requests": 0, "answered_ok": 0, "answered_error": 0, "unanswered": 0}
    by_kind = dict.fromkeys(KINDS, 0)
    big_sent = 0
    inbox = nc.new_inbox()
    answered: dict[str, bool] = {}  # message key → answered ok (False: answered with an error)
    request_keys: set[str] = set()  # the requests among them (other messages may be answered too: dead letters)
    sent_as: dict[str, str] = {}  # request key → "<catalog subject> <kind>", to name what went unanswered

    bugs: dict[str, str] = {}  # message key → the handler error / traceback it was answered with

    def is_error(key: str, msg: Any) -> bool:
        failure = handler_failure(msg.data, msg.headers)
        if failure is not None:
            bugs[key] = failure
        return (msg.headers or {}).get("Eru-Status") == "error" or b"error" in msg.data[:64]

    async def on_reply(msg: Any) -> None:
        key = msg.subject.rsplit(".", 1)[-1]
        answered[key] = not is_error(key, msg)

    await nc.subscribe(f"{inbox}.*", cb=on_reply)

    async def one(index: int) -> None:
        nonlocal big_sent
        entry = CATALOG[index % len(CATALOG)]
        kind = KINDS[rng.randrange(len(KINDS) - 1)]
        if big_limit and index % max(1, total // big_limit) == 0 and big_sent < big_limit:
            kind, big_sent = "big", big_sent + 1  # a few 10 MB bodies, spread over the run
        body, content_type = body_of(kind, entry, rng)
        by_kind[kind] += 1
        subject = subject_of(entry, rng, nodes if kind not in ("absurd", "wrong_types", "bad_strings") else [])
        key = f"f{index}"
        envelope = new_envelope("eru.fuzz", "faults-fuzz", message_id=f"fuzz-{seed}-{index}")
        headers = {**message_headers(envelope, content_type), H_REPLY_TO: f"{inbox}.{key}"}
        counts["sent"] += 1
        core = entry.stream.startswith("—")  # core request/reply: the allocator's operations, the distributor
        try:
            if core:
                msg = await nc.request(subject, body, timeout=5.0, headers=headers)
                answered[key] = not is_error(key, msg)
            else:
                await js.publish(subject, body, headers=headers, timeout=5.0)
        except nats.errors.NoRespondersError:
            if not core or PLACEHOLDERS["<node>"] in subject.split("."):
                # not stored; or a request to a node no agent serves (`eru.node.fuzz-node.attach`): the bus's own
                # "no responders" is the right answer there, nothing of eru's was asked
                counts["refused_by_bus"] += 1
                return
        except (nats.errors.TimeoutError, TimeoutError):
            if not core:
                counts["refused_by_bus"] += 1  # not stored
                return
        except Exception:  # the bus refused it (max payload, permissions)
            counts["refused_by_bus"] += 1
            return
        sent_as[key] = f"{entry.subject} {kind}"
        if entry.reply is not None:  # a request: counted answered or not
            counts["requests"] += 1
            request_keys.add(key)

    started = time.monotonic()
    for first in range(0, total, 200):
        await asyncio.gather(*(one(i) for i in range(first, min(first + 200, total))))
    await late_answers(answered, request_keys)
    replies = [ok for key, ok in answered.items() if key in request_keys]
    counts["answered_ok"] = sum(1 for ok in replies if ok)
    counts["answered_error"] = sum(1 for ok in replies if not ok)
    counts["unanswered"] = counts["requests"] - len(replies)
    counts["other_messages_answered"] = len(answered) - len(replies)
    await nc.close()
    missing = Counter(sent_as[key] for key in request_keys if key not in answered)
    return {
        **counts,
        "handler_errors": len(bugs),  # answers that report a bug (handler_error, a traceback): the target is 0
        "handler_error_examples": sorted({f"{sent_as.get(key, key)}: {why}" for key, why in bugs.items()})[:5],
        "by_kind": by_kind,
        "unanswered_by_subject": dict(sorted(missing.items())),
        "seconds": round(time.monotonic() - started, 1),
    }
