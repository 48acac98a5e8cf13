"""Durable pull consumers shared by every replica of a service, and the runner that drives a typed handler.

One message's way through `Consumer.run`:

1. decode the body into the model and read the envelope; a bad body or envelope is logged once (naming the field),
   dead-lettered and terminated, and the handler never sees it;
2. run the handler (at most `concurrency` at a time); success → ack;
3. `Retryable` or an unexpected exception → nak with backoff (`Retryable.delay` wins), until the delivery count
   reaches `max_deliver`, then dead-letter + term;
4. `Permanent` or `InvalidInput` from the handler → dead-letter + term at once.

`stop()` (or the `stop` event) ends fetching; handlers already running finish, then `run` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

import structlog
from nats.js import api
from nats.js.errors import NotFoundError
from pydantic import BaseModel

from eru import telemetry
from eru.bus.codec import decode, media_type
from eru.bus.connection import describe
from eru.bus.dead_letters import publish_dead_letter
from eru.bus.envelope import H_CONTENT_TYPE, H_ID, H_MSG_ID, Envelope
from eru.bus.errors import BusError, BusUnavailable, Permanent, Retryable
from eru.errors import InvalidInput

log = structlog.get_logger()

ModelT = TypeVar("ModelT", bound=BaseModel)
H_REPLY_TO = "Eru-Reply-To"
EXTERNAL_SOURCE = "external"


@dataclass(frozen=True)
class Delivery:
    """Where a message came from and how often it has been delivered."""

    subject: str
    stream: str
    consumer: str
    stream_sequence: int
    deliveries: int
    pending: int
    timestamp: datetime
    headers: Mapping[str, str]
    content_type: str
    reply_to: str | None
    _msg: Any = field(default=None, repr=False, compare=False)

    async def in_progress(self) -> None:
        """Tell JetStream the handler is still working (resets the ack timer); for handlers longer than ack_wait."""
        if self._msg is not None:
            await self._msg.in_progress()


Handler = Callable[[ModelT, Envelope, Delivery], Awaitable[None]]


@dataclass(frozen=True)
class ConsumerOptions:
    """How a consumer fetches, retries and gives up."""

    batch: int = 16
    concurrency: int = 8
    max_deliver: int = 5
    ack_wait_seconds: float = 30.0
    backoff_seconds: tuple[float, ...] = (0.5, 2.0, 10.0, 30.0)
    fetch_timeout_seconds: float = 1.0
    max_ack_pending: int = 1000
    deliver_new_only: bool = False

    def delay_for(self, deliveries: int) -> float:
        """The nak delay after the `deliveries`-th failed delivery."""
        if not self.backoff_seconds:
            return 0.0
        return self.backoff_seconds[min(max(deliveries, 1), len(self.backoff_seconds)) - 1]


@dataclass
class ConsumerStats:
    """Counters of one consumer runner (read by the service's load report)."""

    handled: int = 0
    retried: int = 0
    rejected: int = 0
    dead_lettered: int = 0
    in_flight: int = 0


def envelope_of(msg: Any) -> Envelope:
    """The message's envelope; a message published without one (a plain NATS client) gets one from its metadata.

    The stand-in id is the `Nats-Msg-Id` or the stream position, so every redelivery sees the same id.
    """
    headers = msg.headers or {}
    if H_ID in headers:
        return Envelope.from_headers(headers)
    metadata = msg.metadata
    message_id = headers.get(H_MSG_ID) or f"{metadata.stream}:{metadata.sequence.stream}"
    return Envelope(
        id=message_id,
        type=msg.subject,
        source=EXTERNAL_SOURCE,
        time=metadata.timestamp,
        correlation_id=message_id,
    )


def delivery_of(msg: Any) -> Delivery:
    """The metadata of a JetStream message as a `Delivery`."""
    metadata = msg.metadata
    headers = dict(msg.headers or {})
    return Delivery(
        subject=msg.subject,
        stream=metadata.stream,
        consumer=metadata.consumer,
        stream_sequence=metadata.sequence.stream,
        deliveries=metadata.num_delivered,
        pending=metadata.num_pending,
        timestamp=metadata.timestamp,
        headers=headers,
        content_type=headers.get(H_CONTENT_TYPE, ""),
        reply_to=headers.get(H_REPLY_TO) or None,
        _msg=msg,
    )


async def ensure_consumer(
    js: Any, stream: str, durable: str, subject_filter: str, options: ConsumerOptions = ConsumerOptions()
) -> Any:
    """Create (or update) the durable pull consumer; every replica calling this shares one consumer."""
    config = api.ConsumerConfig(
        name=durable,
        durable_name=durable,
        filter_subject=subject_filter,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=options.ack_wait_seconds,
        # The runner counts deliveries itself and dead-letters; the server must never drop a message silently.
        max_deliver=-1,
        max_ack_pending=options.max_ack_pending,
        deliver_policy=api.DeliverPolicy.NEW if options.deliver_new_only else api.DeliverPolicy.ALL,
    )
    return await js.add_consumer(stream, config=config)


class Consumer(Generic[ModelT]):
    """Runs `handler` over a durable pull consumer until stopped; see the module docstring for the policy."""

    def __init__(
        self,
        js: Any,
        stream: str,
        durable: str,
        subject_filter: str,
        model_type: type[ModelT],
        handler: Handler[ModelT],
        *,
        options: ConsumerOptions = ConsumerOptions(),
        stop: asyncio.Event | None = None,
    ) -> None:
        if options.concurrency < 1 or options.batch < 1:
            raise InvalidInput("consumer.concurrency", "concurrency and batch must be at least 1")
        self.js = js
        self.stream = stream
        self.durable = durable
        self.subject_filter = subject_filter
        self.model_type = model_type
        self.handler = handler
        self.options = options
        self.stats = ConsumerStats()
        self._stopping = stop or asyncio.Event()
        self._log = log.bind(stream=stream, consumer=durable)
        # this consumer's metric series, looked up once (a label lookup takes a lock; this runs for every message)
        self._in_flight_gauge = telemetry.IN_FLIGHT.labels(durable)
        self._handle_seconds = telemetry.HANDLE_SECONDS.labels(durable)
        self._pending_gauge = telemetry.CONSUMER_PENDING.labels(durable)
        self._outcomes: dict[str, Any] = {}

    def _count(self, outcome: str) -> None:
        counter = self._outcomes.get(outcome)
        if counter is None:
            counter = self._outcomes[outcome] = telemetry.MESSAGES.labels(self.durable, outcome)
        counter.inc()

    def stop(self) -> None:
        """Stop fetching; `run` returns once the handlers already running have finished."""
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        """True once a stop was asked for."""
        return self._stopping.is_set()

    async def run(self) -> None:
        """Fetch and handle until stopped."""
        try:
            await ensure_consumer(self.js, self.stream, self.durable, self.subject_filter, self.options)
        except NotFoundError:
            raise BusError(
                f"stream {self.stream} does not exist: provision the streams first (eru up, provision_streams)",
                stream=self.stream,
            ) from None
        subscription = await self.js.pull_subscribe_bind(durable=self.durable, stream=self.stream)
        in_flight: set[asyncio.Task[None]] = set()
        self._log.info("bus.consumer.started", filter=self.subject_filter, concurrency=self.options.concurrency)
        try:
            while not self._stopping.is_set():
                free = self.options.concurrency - len(in_flight)
                if free <= 0:
                    await self._wait_for_slot(in_flight)
                    continue
                messages = await self._fetch(subscription, min(free, self.options.batch))
                if self._stopping.is_set():
                    # Fetched after the stop: hand them straight back for another replica.
                    for msg in messages:
                        with contextlib.suppress(Exception):
                            await msg.nak()
                    break
                for msg in messages:
                    task = asyncio.create_task(self._process(msg))
                    in_flight.add(task)
                    task.add_done_callback(in_flight.discard)
        finally:
            if in_flight:
                self._log.info("bus.consumer.draining", in_flight=len(in_flight))
                await asyncio.gather(*in_flight, return_exceptions=True)
            with contextlib.suppress(Exception):
                await self.js._nc.flush(timeout=2)
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
            self._log.info("bus.consumer.stopped", handled=self.stats.handled)

    async def _wait_for_slot(self, in_flight: set[asyncio.Task[None]]) -> None:
        stop_wait = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({*in_flight, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()

    async def _fetch(self, subscription: Any, batch: int) -> list[Any]:
        try:
            messages: list[Any] = await subscription.fetch(batch, timeout=self.options.fetch_timeout_seconds)
            return messages
        except TimeoutError:
            return []
        except Exception as error:
            if self.js._nc.is_closed:
                where = f"{self.stream}/{self.durable}"
                raise BusUnavailable(f"connection to NATS closed while consuming {where}") from None
            self._log.warning("bus.consumer.fetch_failed", error=describe(error))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=1.0)
            return []

    async def _process(self, msg: Any) -> None:
        self.stats.in_flight += 1
        in_flight = self._in_flight_gauge
        in_flight.inc()
        try:
            with self._handle_seconds.time():
                await self._handle(msg)
        except Exception as error:  # the runner must survive anything, including a lost connection
            self._log.error("bus.consumer.internal_error", subject=msg.subject, error=describe(error))
            self._count("internal_error")
        finally:
            self.stats.in_flight -= 1
            in_flight.dec()

    async def _handle(self, msg: Any) -> None:
        delivery = delivery_of(msg)
        self._pending_gauge.set(delivery.pending)
        where = {"subject": delivery.subject, "seq": delivery.stream_sequence, "delivery": delivery.deliveries}
        try:
            envelope = envelope_of(msg)
            model = decode(msg.data, self.model_type, media_type(delivery.content_type or None))
        except InvalidInput as error:
            self.stats.rejected += 1
            self._count("rejected")
            self._log.error("bus.message.rejected", field=error.field, reason=error.reason, **where)
            await self._dead_letter(msg, f"rejected: {error.message}", error.field)
            return
        # Each message is handled in its own task, so these ids reach every log line of this handler and no other.
        structlog.contextvars.bind_contextvars(
            correlation_id=envelope.correlation_id, causation_id=envelope.id, message_type=envelope.type
        )
        if delivery.deliveries > self.options.max_deliver:
            reason = f"delivered {delivery.deliveries} times without an ack (max_deliver {self.options.max_deliver})"
            self._log.error("bus.message.gave_up", reason=reason, ce_id=envelope.id, **where)
            await self._dead_letter(msg, reason)
            return
        try:
            await self.handler(model, envelope, delivery)
        except (Permanent, InvalidInput) as error:
            reason = error.reason if isinstance(error, Permanent) else error.message
            self._log.error("bus.message.failed_permanently", reason=reason, ce_id=envelope.id, **where)
            await self._dead_letter(msg, f"permanent: {reason}", getattr(error, "field", None))
            return
        except Exception as error:
            await self._retry_or_give_up(msg, delivery, envelope, error, where)
            return
        await msg.ack()
        self.stats.handled += 1
        self._count("handled")

    async def _retry_or_give_up(
        self, msg: Any, delivery: Delivery, envelope: Envelope, error: Exception, where: dict[str, Any]
    ) -> None:
        reason = error.reason if isinstance(error, Retryable) else f"{type(error).__name__}: {describe(error)}"
        if delivery.deliveries >= self.options.max_deliver:
            self._log.error("bus.message.gave_up", reason=reason, ce_id=envelope.id, **where)
            await self._dead_letter(msg, f"gave up after {delivery.deliveries} deliveries: {reason}")
            return
        delay = error.delay if isinstance(error, Retryable) and error.delay is not None else None
        if delay is None:
            delay = self.options.delay_for(delivery.deliveries)
        if isinstance(error, Retryable):
            self._log.warning("bus.message.retry", reason=reason, delay=delay, ce_id=envelope.id, **where)
        else:
            self._log.exception("bus.message.handler_error", reason=reason, delay=delay, ce_id=envelope.id, **where)
        self.stats.retried += 1
        self._count("retried")
        await msg.nak(delay=delay)

    async def _dead_letter(self, msg: Any, reason: str, field: str | None = None) -> None:
        try:
            subject = await publish_dead_letter(self.js, msg, reason, field=field)
        except Exception as error:
            # Keep the message rather than lose it: it comes back after the delay and we try again.
            self._log.error("bus.dead_letter.failed", subject=msg.subject, error=describe(error))
            await msg.nak(delay=self.options.delay_for(len(self.options.backoff_seconds)))
            return
        self.stats.dead_lettered += 1
        self._count("dead_lettered")
        self._log.warning("bus.message.dead_lettered", subject=msg.subject, dead_letter=subject, reason=reason)
        await msg.term()


async def consume(
    js: Any,
    stream: str,
    durable: str,
    subject_filter: str,
    model_type: type[ModelT],
    handler: Handler[ModelT],
    *,
    options: ConsumerOptions = ConsumerOptions(),
    stop: asyncio.Event | None = None,
) -> None:
    """Run `handler` over the durable consumer `durable` of `stream` until `stop` is set (see `Consumer`)."""
    await Consumer(js, stream, durable, subject_filter, model_type, handler, options=options, stop=stop).run()
