"""The consumer runner against a real nats-server: round trip, redelivery, dead letters, rejection, graceful stop."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgpack
from bus_helpers import Job, Resources, eventually
from structlog.testing import capture_logs

from eru.bus import subjects
from eru.bus.codec import JSON, encode
from eru.bus.consumer import Consumer, ConsumerOptions, Delivery
from eru.bus.dead_letters import H_FIELD, H_REASON, H_SEQUENCE
from eru.bus.envelope import Envelope, new_envelope
from eru.bus.errors import Permanent, Retryable
from eru.bus.publish import publish
from eru.bus.streams import DLQ, EVENTS, provision_streams

SUBJECT = subjects.container_event("node-1", "started")
FAST = ConsumerOptions(batch=4, concurrency=4, max_deliver=3, backoff_seconds=(0.05,), fetch_timeout_seconds=0.2)


def job(name: str, cores: float = 1.5) -> Job:
    return Job(name=name, request=Resources(cpu_request=cores, memory=1 << 20), tags=["a"])


class Recorder:
    """A handler that records what it saw and can be told to fail."""

    def __init__(self) -> None:
        self.seen: list[tuple[Job, Envelope, Delivery]] = []
        self.fail: dict[str, Exception] = {}
        self.fail_times: dict[str, int] = {}

    async def __call__(self, model: Job, envelope: Envelope, delivery: Delivery) -> None:
        self.seen.append((model, envelope, delivery))
        if model.name in self.fail and self.fail_times.get(model.name, 1_000_000) > 0:
            self.fail_times[model.name] = self.fail_times.get(model.name, 1_000_000) - 1
            raise self.fail[model.name]

    def names(self) -> list[str]:
        return [model.name for model, _, _ in self.seen]


async def start(js: Any, handler: Any, options: ConsumerOptions = FAST) -> tuple[Consumer[Job], asyncio.Task[None]]:
    consumer = Consumer(js, EVENTS, "test-worker", "eru.container.*.*", Job, handler, options=options)
    return consumer, asyncio.create_task(consumer.run())


async def finish(consumer: Consumer[Job], task: asyncio.Task[None]) -> None:
    consumer.stop()
    await asyncio.wait_for(task, timeout=10)


async def dead_letters(js: Any) -> list[Any]:
    info = await js.stream_info(DLQ)
    return [await js.get_msg(DLQ, seq) for seq in range(info.state.first_seq, info.state.last_seq + 1)][
        : info.state.messages
    ]


async def test_typed_message_round_trips_with_its_envelope(js: Any) -> None:
    await provision_streams(js)
    sent = job("web")
    envelope = new_envelope("container.started", "node-agent/node-1", correlation_id="deploy-7")
    ack = await publish(js, SUBJECT, sent, envelope)
    assert ack.stream == EVENTS
    recorder = Recorder()
    consumer, task = await start(js, recorder)
    await eventually(lambda: consumer.stats.handled == 1)
    await finish(consumer, task)
    model, got_envelope, delivery = recorder.seen[0]
    assert model == sent
    assert got_envelope.id == envelope.id
    assert got_envelope.correlation_id == "deploy-7"
    assert got_envelope.time == envelope.time
    assert (delivery.subject, delivery.stream, delivery.deliveries) == (SUBJECT, EVENTS, 1)
    consumer_info = await js.consumer_info(EVENTS, "test-worker")
    assert consumer_info.num_ack_pending == 0
    assert consumer_info.num_pending == 0


async def test_same_ce_id_published_twice_is_stored_once(js: Any) -> None:
    await provision_streams(js)
    envelope = new_envelope("container.started", "node-agent/node-1")
    first = await publish(js, SUBJECT, job("web"), envelope)
    second = await publish(js, SUBJECT, job("web"), envelope)
    third = await publish(js, SUBJECT, job("web"), new_envelope("container.started", "node-agent/node-1"))
    assert (first.duplicate, second.duplicate, third.duplicate) == (None, True, None)
    assert second.seq == first.seq
    info = await js.stream_info(EVENTS)
    assert info.state.messages == 2


async def test_retryable_failure_is_redelivered_after_nak(js: Any) -> None:
    await provision_streams(js)
    recorder = Recorder()
    recorder.fail["flaky"] = Retryable("database busy", delay=0.1)
    recorder.fail_times["flaky"] = 1
    await publish(js, SUBJECT, job("flaky"), new_envelope("t", "s"))
    consumer, task = await start(js, recorder)
    await eventually(lambda: consumer.stats.handled == 1)
    await finish(consumer, task)
    assert recorder.names() == ["flaky", "flaky"]
    assert [delivery.deliveries for _, _, delivery in recorder.seen] == [1, 2]
    assert recorder.seen[0][1].id == recorder.seen[1][1].id
    assert consumer.stats.retried == 1
    assert consumer.stats.dead_lettered == 0


async def test_poison_message_is_dead_lettered_and_the_next_ones_are_processed(js: Any) -> None:
    await provision_streams(js)
    recorder = Recorder()
    recorder.fail["poison"] = Permanent("image does not exist")
    recorder.fail["crashy"] = RuntimeError("bug in handler")
    for name in ("before", "poison", "crashy", "after-1", "after-2"):
        await publish(js, SUBJECT, job(name), new_envelope("t", "s"))
    consumer, task = await start(js, recorder, FAST)
    await eventually(lambda: consumer.stats.handled == 3 and consumer.stats.dead_lettered == 2)
    await finish(consumer, task)
    assert recorder.names().count("poison") == 1, "a permanent failure is never retried"
    assert recorder.names().count("crashy") == 1, "a handler bug is dead-lettered at once, never looped"
    assert {"before", "after-1", "after-2"} <= set(recorder.names())
    letters = await dead_letters(js)
    assert [letter.subject for letter in letters] == [subjects.dead_letter(SUBJECT)] * 2
    reasons = sorted(letter.headers[H_REASON] for letter in letters)
    assert reasons[0] == "handler_error: RuntimeError: bug in handler"
    assert reasons[1] == "permanent: image does not exist"
    assert {msgpack.unpackb(letter.data)["name"] for letter in letters} == {"poison", "crashy"}
    assert all(letter.headers["ce-id"] for letter in letters), "the original envelope travels with the dead letter"


async def test_malformed_and_schema_violating_bodies_are_rejected_naming_the_field(js: Any) -> None:
    await provision_streams(js)
    recorder = Recorder()
    headers = new_envelope("t", "s").to_headers()
    await js.publish(SUBJECT, b"\xc1\x00garbage", headers=headers)
    bad_schema = {"name": "web", "request": {"cpu_request": "lots", "memory": 1}}
    await js.publish(SUBJECT, msgpack.packb(bad_schema), headers=new_envelope("t", "s").to_headers())
    await publish(js, SUBJECT, job("good"), new_envelope("t", "s"))
    with capture_logs() as logs:
        consumer, task = await start(js, recorder)
        await eventually(lambda: consumer.stats.handled == 1 and consumer.stats.rejected == 2)
        await finish(consumer, task)
    assert recorder.names() == ["good"], "the handler never sees a rejected message"
    rejected = [entry for entry in logs if entry["event"] == "bus.message.rejected"]
    assert [(entry["log_level"], entry["field"]) for entry in rejected] == [  # the sender's mistake: a warning
        ("warning", "body"),
        ("warning", "request.cpu_request"),
    ]
    assert "msgpack" in rejected[0]["reason"]
    assert "number" in rejected[1]["reason"]
    letters = await dead_letters(js)
    assert [letter.headers[H_FIELD] for letter in letters] == ["body", "request.cpu_request"]
    assert letters[0].data == b"\xc1\x00garbage", "the dead letter keeps the raw body"
    assert consumer.stats.retried == 0


async def test_json_body_with_content_type_is_accepted(js: Any) -> None:
    await provision_streams(js)
    recorder = Recorder()
    body = json.dumps({"name": "from-json", "request": {"cpu_request": 0.5, "memory": 2048}}).encode()
    await js.publish(SUBJECT, body, headers={**new_envelope("t", "s").to_headers(), "Content-Type": JSON})
    # A plain client without any envelope is accepted too; its id is stable across redeliveries.
    await js.publish(SUBJECT, encode(job("bare")))
    consumer, task = await start(js, recorder)
    await eventually(lambda: consumer.stats.handled == 2)
    await finish(consumer, task)
    by_name = {model.name: (model, envelope) for model, envelope, _ in recorder.seen}
    assert by_name["from-json"][0] == Job(name="from-json", request=Resources(cpu_request=0.5, memory=2048))
    bare_envelope = by_name["bare"][1]
    assert bare_envelope.source == "external"
    assert bare_envelope.id == f"{EVENTS}:2"


async def test_graceful_stop_finishes_the_in_flight_handler(js: Any) -> None:
    await provision_streams(js)
    started = asyncio.Event()
    release = asyncio.Event()
    finished: list[str] = []

    async def slow(model: Job, envelope: Envelope, delivery: Delivery) -> None:
        started.set()
        await release.wait()
        finished.append(model.name)

    await publish(js, SUBJECT, job("slow"), new_envelope("t", "s"))
    consumer, task = await start(js, slow)
    await asyncio.wait_for(started.wait(), timeout=10)
    consumer.stop()
    await asyncio.sleep(0.5)
    assert not task.done(), "run() must wait for the handler in flight"
    await publish(js, SUBJECT, job("late"), new_envelope("t", "s"))
    release.set()
    await asyncio.wait_for(task, timeout=10)
    assert finished == ["slow"], "after stop nothing new is started"
    info = await js.consumer_info(EVENTS, "test-worker")
    assert info.num_ack_pending == 0
    assert info.num_pending == 1, "the late message waits for the next replica"


async def test_replicas_share_one_durable_consumer(js: Any) -> None:
    await provision_streams(js)
    first, second = Recorder(), Recorder()
    for index in range(20):
        await publish(js, SUBJECT, job(f"job-{index}"), new_envelope("t", "s"))
    one = Consumer(js, EVENTS, "shared", "eru.container.*.*", Job, first, options=FAST)
    two = Consumer(js, EVENTS, "shared", "eru.container.*.*", Job, second, options=FAST)
    tasks = [asyncio.create_task(one.run()), asyncio.create_task(two.run())]
    await eventually(lambda: one.stats.handled + two.stats.handled == 20)
    one.stop()
    two.stop()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
    assert sorted(first.names() + second.names()) == sorted(f"job-{index}" for index in range(20))
    assert H_SEQUENCE  # the header name exists for dead letters; sharing produced none
    assert one.stats.dead_lettered + two.stats.dead_lettered == 0


async def test_handler_logs_carry_the_messages_correlation_and_causation_ids(js: Any) -> None:
    import structlog

    await provision_streams(js)
    seen_context: list[dict[str, Any]] = []

    async def handler(model: Job, envelope: Envelope, delivery: Delivery) -> None:
        seen_context.append(structlog.contextvars.get_contextvars())

    first = new_envelope("container.started", "node-agent/node-1", correlation_id="deploy-1")
    second = new_envelope("container.started", "node-agent/node-1", correlation_id="deploy-2")
    await publish(js, SUBJECT, job("a"), first)
    await publish(js, SUBJECT, job("b"), second)
    consumer, task = await start(js, handler)
    await eventually(lambda: consumer.stats.handled == 2)
    await finish(consumer, task)
    by_correlation = {context["correlation_id"]: context for context in seen_context}
    assert by_correlation["deploy-1"]["causation_id"] == first.id
    assert by_correlation["deploy-2"]["causation_id"] == second.id
    assert "correlation_id" not in structlog.contextvars.get_contextvars()
