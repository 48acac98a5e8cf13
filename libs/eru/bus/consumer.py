"""Durable pull consumers shared by every replica of a service, and the runner that drives a typed handler.

Every message is settled exactly once (docs/bus.md "Settling"): acked, or dead-lettered and terminated with its
reason, and answered with an `ErrorReply` when it carries a reply address. One message's way through `Consumer.run`:

1. decode the body (bounded, docs/bus.md "Bounded decoding") and the envelope; anything that does not decode —
   whatever the exception — is answered `invalid_input` naming the field, dead-lettered and terminated;
2. run the handler (at most `concurrency` at a time); a transient failure (PostgreSQL or the network unreachable,
   eru.retry) is retried in place with backoff, the message kept in progress, for `store_retry_seconds`;
   success → ack;
3. `Retryable` → nak with backoff (`Retryable.delay` wins), until the delivery count reaches `max_deliver`, then
   dead-letter + term, answered `unavailable`;
4. `Permanent` or an `EruError` → dead-letter + term at once, answered with its code; a transient failure past its
   deadline → `store_unavailable`; any other exception (a bug, RecursionError …) → `handler_error`, the traceback
   in the log.

The consumer heals itself: when its durable consumer vanishes (deleted through the JetStream API) it is re-created
within `heal_check_seconds`, starting after the last ack floor it saw, so it does not replay handled history.
`stop()` (or the `stop` event) ends fetching; handlers already running finish, then `run` returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import structlog
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from pydantic import BaseModel

from eru import telemetry
from eru.bounded import BODY_FIELD
from eru.bus.codec import JSON, MSGPACK, decode, media_type
from eru.bus.connection import describe
from eru.bus.consumer_config import (
    ConsumerOptions,
    ConsumerStats,
    Failure,
    SubjectFilter,
    consumer_config,
    ensure_consumer,
)
from eru.bus.dead_letters import publish_dead_letter
from eru.bus.delivery import EXTERNAL_SOURCE as EXTERNAL_SOURCE
from eru.bus.delivery import Delivery, delivery_of, envelope_of
from eru.bus.errors import BusError, BusUnavailable, Permanent, Retryable
from eru.bus.replies import H_REPLY_TO as H_REPLY_TO
from eru.bus.replies import send_reply
from eru.bus.standing_pull import StandingPull
from eru.envelope import Envelope
from eru.errors import EruError, InvalidInput, PermissionDenied, PlanningFailure
from eru.retry import is_store_outage, is_transient, retry_transient

log = structlog.get_logger()

ModelT = TypeVar("ModelT", bound=BaseModel)
__all__ = [
    "Consumer",
    "ConsumerOptions",
    "ConsumerStats",
    "Delivery",
    "Failure",
    "consume",
    "consumer_config",
    "delivery_of",
    "ensure_consumer",
    "envelope_of",
]

Handler = Callable[[ModelT, Envelope, Delivery], Awaitable[None]]


class Consumer(Generic[ModelT]):
    """Runs `handler` over a durable pull consumer until stopped; see the module docstring for the policy."""

    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        durable: str,
        subject_filter: SubjectFilter,
        model_type: type[ModelT],
        handler: Handler[ModelT],
        *,
        options: ConsumerOptions = ConsumerOptions(),
        stop: asyncio.Event | None = None,
        source: str | None = None,
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
        self.source = source or f"consumer/{durable}"
        self.stats = ConsumerStats()
        self._stopping = stop or asyncio.Event()
        self._log = log.bind(stream=stream, consumer=durable)
        # this consumer's metric series, looked up once (a label lookup takes a lock; this runs for every message)
        self._in_flight_gauge = telemetry.IN_FLIGHT.labels(durable)
        self._handle_seconds = telemetry.HANDLE_SECONDS.labels(durable)
        self._pending_gauge = telemetry.CONSUMER_PENDING.labels(durable)
        self._outcomes: dict[str, Any] = {}
        self._ack_floor = 0
        self._next_check = 0.0

    def _count(self, outcome: str) -> None:
        counter = self._outcomes.get(outcome)
        if counter is None:
            counter = self._outcomes[outcome] = telemetry.MESSAGES.labels(self.durable, outcome)
        counter.inc()

    def stop(self) -> None:
        """Stop fetching; `run` returns once the handlers already running have finished."""
        self._stopping.set()

    @property
    def ack_floor(self) -> int:
        """The stream sequence up to which the consumer had acknowledged everything at the last health check; a
        re-created consumer starts after it (what lies between is handled again and deduplicated by the service)."""
        return self._ack_floor

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
        pull = StandingPull(subscription, expires_seconds=self.options.fetch_timeout_seconds)
        in_flight: set[asyncio.Task[None]] = set()
        shown = self.subject_filter if isinstance(self.subject_filter, str) else f"{len(self.subject_filter)} subjects"
        self._log.info("bus.consumer.started", filter=shown, concurrency=self.options.concurrency)
        try:
            while not self._stopping.is_set():
                await self._check_health()
                free = self.options.concurrency - len(in_flight)
                if free <= 0:
                    await self._wait_for_slot(in_flight)
                    continue
                # Delivered already, under a request asked when this consumer had a larger pace (a replica that led
                # and no longer does): handled now, not one per paced wait (docs/bus.md "Fetching").
                messages = pull.take_delivered(min(free, self.options.batch))
                if not messages:
                    batch = await self.next_batch(free)
                    if self._stopping.is_set():
                        break
                    messages = await self._fetch(pull, batch)
                if self._stopping.is_set():
                    # Fetched after the stop: handed back for another replica once the open request ends (below).
                    pull.give_back(messages)
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
                # what the open pull request delivered or still brings goes back at once, not after ack_wait
                await pull.release()
            with contextlib.suppress(Exception):
                await self.js._nc.flush(timeout=2)
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()
            self._log.info("bus.consumer.stopped", handled=self.stats.handled)

    async def next_batch(self, free: int) -> int:
        """How many messages to fetch now (at most `free`, the handler slots left); it may wait first, returning early
        when stopped. A subclass paces a shared intake it mostly passes on (eru_allocator.intake.routing)."""
        return min(free, self.options.batch)

    async def _check_health(self, *, now: bool = False) -> None:
        """Every `heal_check_seconds`: remember the ack floor, and re-create the durable consumer if it vanished."""
        clock = time.monotonic()
        if not now and clock < self._next_check:
            return
        self._next_check = clock + self.options.heal_check_seconds
        try:
            # bounded by the fetch timeout, not the JetStream context's 5 s: asked while the consumer elects a new
            # leader (its server died) nobody answers, and the fetch loop would wait out those seconds after the
            # election before fetching again (docs/deploy.md "Where the seconds of a failover go")
            info = await self.js.consumer_info(self.stream, self.durable, timeout=self.options.fetch_timeout_seconds)
            self._ack_floor = max(self._ack_floor, info.ack_floor.stream_seq or 0)
            return
        except NotFoundError:
            pass
        except Exception as error:  # the server is away: the fetch loop reports it, the next check tries again
            self._log.debug("bus.consumer.check_failed", error=describe(error))
            return
        start = self._ack_floor + 1 if self._ack_floor and not self.options.work_queue else None
        try:
            await ensure_consumer(
                self.js, self.stream, self.durable, self.subject_filter, self.options, start_sequence=start
            )
        except Exception as error:
            self._log.warning("bus.consumer.recreate_failed", error=describe(error))
            return
        self.stats.recreated += 1
        self._count("recreated")
        self._log.warning("bus.consumer.recreated", start_sequence=start, reason="the durable consumer vanished")

    async def _wait_for_slot(self, in_flight: set[asyncio.Task[None]]) -> None:
        stop_wait = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait(
                {*in_flight, stop_wait}, timeout=self.options.heal_check_seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stop_wait.cancel()

    async def _fetch(self, pull: StandingPull, batch: int) -> list[Any]:
        try:
            # not `subscription.fetch(batch)`: it can hold a delivered message until an old pull expires, and asks
            # again for every message at a trickle (eru.bus.standing_pull)
            return await pull.fetch(batch, self.options.fetch_timeout_seconds)
        except TimeoutError:
            return []
        except Exception as error:
            if self.js._nc.is_closed:
                where = f"{self.stream}/{self.durable}"
                raise BusUnavailable(f"connection to NATS closed while consuming {where}") from None
            self._log.warning("bus.consumer.fetch_failed", error=describe(error))
            await self._check_health(now=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=0.5)
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
        except Exception as error:  # whatever the decoder raises, the message is answered and settled
            problem = error if isinstance(error, InvalidInput) else InvalidInput(BODY_FIELD, describe(error))
            self.stats.rejected += 1
            self._count("rejected")
            # the sender's mistake, answered and dead-lettered: a warning, never an error of this service
            self._log.warning("bus.message.rejected", field=problem.field, reason=problem.reason, **where)
            failure = Failure(f"rejected: {problem.message}", "invalid_input", problem.field, problem.message)
            await self._dead_letter(msg, delivery, None, None, failure)
            return
        # Each message is handled in its own task, so these ids reach every log line of this handler and no other.
        structlog.contextvars.bind_contextvars(
            correlation_id=envelope.correlation_id, causation_id=envelope.id, message_type=envelope.type
        )
        if delivery.deliveries > self.options.max_deliver:
            reason = f"delivered {delivery.deliveries} times without an ack (max_deliver {self.options.max_deliver})"
            self._log.error("bus.message.gave_up", reason=reason, ce_id=envelope.id, **where)
            await self._dead_letter(msg, delivery, model, envelope, Failure(reason, "unavailable"))
            return
        try:
            await self._run_handler(model, envelope, delivery)
        except Retryable as error:
            await self._retry_or_give_up(msg, delivery, model, envelope, error, where)
            return
        except Exception as error:
            failure = self._failure(error, envelope, where)
            await self._dead_letter(msg, delivery, model, envelope, failure)
            return
        await msg.ack()
        self.stats.handled += 1
        self._count("handled")

    async def _run_handler(self, model: ModelT, envelope: Envelope, delivery: Delivery) -> None:
        """The handler, rerun in place after transient failures until `store_retry_seconds` have passed."""

        async def waiting(error: BaseException, wait: float, attempt: int) -> None:
            self._log.warning(
                "bus.message.transient_failure", error=describe(error), attempt=attempt, retry_in=round(wait, 2)
            )
            with contextlib.suppress(Exception):
                await delivery.in_progress()

        await retry_transient(
            lambda: self.handler(model, envelope, delivery),
            deadline_seconds=self.options.store_retry_seconds,
            max_wait_seconds=min(5.0, self.options.ack_wait_seconds / 3),
            on_retry=waiting,
        )

    def _failure(self, error: Exception, envelope: Envelope, where: dict[str, Any]) -> Failure:
        """How a handler's exception settles its message (see the module docstring)."""
        if is_transient(error):
            code = "store_unavailable" if is_store_outage(error) else "unavailable"
            after = f"after {self.options.store_retry_seconds:g}s of retries"
            reason = f"{code}: {describe(error)} ({after})"
            self._log.error("bus.message.gave_up", reason=reason, ce_id=envelope.id, **where)
            return Failure(reason, code, message=f"not done, {code.replace('_', ' ')} {after}: {describe(error)}")
        if isinstance(error, Permanent):
            self._log.error("bus.message.failed_permanently", reason=error.reason, ce_id=envelope.id, **where)
            return Failure(f"permanent: {error.reason}", "permanent", message=error.reason)
        if isinstance(error, EruError):
            # a client's mistake or a refusal (bad input, an unknown id, not enough room, not allowed) is a warning;
            # any other of eru's errors stays an error
            client = isinstance(error, InvalidInput | PlanningFailure | PermissionDenied)
            level = self._log.warning if client else self._log.error
            level("bus.message.failed_permanently", reason=error.message, code=error.code, ce_id=envelope.id, **where)
            return Failure(f"permanent: {error.message}", error.code, getattr(error, "field", None), error.message)
        # a bug: the traceback goes to the log, the message to the dead letters, the consumer carries on
        self._log.exception("bus.message.handler_error", error=describe(error), ce_id=envelope.id, **where)
        reason = f"handler_error: {type(error).__name__}: {describe(error)}"
        return Failure(reason, "handler_error", message=f"the handler failed: {type(error).__name__}")

    async def _retry_or_give_up(
        self, msg: Any, delivery: Delivery, model: ModelT, envelope: Envelope, error: Retryable, where: dict[str, Any]
    ) -> None:
        if delivery.deliveries >= self.options.max_deliver:
            reason = f"gave up after {delivery.deliveries} deliveries: {error.reason}"
            self._log.error("bus.message.gave_up", reason=error.reason, ce_id=envelope.id, **where)
            failure = Failure(reason, "unavailable", message=f"not done, try again later: {error.reason}")
            await self._dead_letter(msg, delivery, model, envelope, failure)
            return
        delay = error.delay if error.delay is not None else self.options.delay_for(delivery.deliveries)
        self._log.warning("bus.message.retry", reason=error.reason, delay=delay, ce_id=envelope.id, **where)
        self.stats.retried += 1
        self._count("retried")
        await msg.nak(delay=delay)

    async def _dead_letter(
        self, msg: Any, delivery: Delivery, model: ModelT | None, envelope: Envelope | None, failure: Failure
    ) -> None:
        try:
            subject = await publish_dead_letter(self.js, msg, failure.reason, field=failure.field)
        except EruError as error:
            # No dead letter can ever be made of it (its subject has no dead-letter subject): trying again would loop
            # for ever and hold a slot of max_ack_pending, so it is terminated with both reasons in the log.
            self._log.error(
                "bus.dead_letter.impossible", subject=msg.subject, reason=failure.reason, error=describe(error)
            )
            self._count("terminated")
            await msg.term()
            return
        except Exception as error:
            # Keep the message rather than lose it: it comes back after the delay and we try again.
            self._log.error("bus.dead_letter.failed", subject=msg.subject, error=describe(error))
            await msg.nak(delay=self.options.delay_for(len(self.options.backoff_seconds)))
            return
        self.stats.dead_lettered += 1
        self._count("dead_lettered")
        self._log.warning("bus.message.dead_lettered", subject=msg.subject, dead_letter=subject, reason=failure.reason)
        await msg.term()
        try:
            await self.on_dead_letter(delivery, model, envelope, failure)
        except Exception as error:  # the message is settled; a failing follow-up is logged, never retried
            self._log.error("bus.dead_letter.follow_up_failed", error=describe(error))
        await self._answer(delivery, envelope, failure)

    async def on_dead_letter(
        self, delivery: Delivery, model: ModelT | None, envelope: Envelope | None, failure: Failure
    ) -> None:
        """Called once a message is dead-lettered (before the error reply); services record it or tell others."""

    async def _answer(self, delivery: Delivery, envelope: Envelope | None, failure: Failure) -> None:
        """The error reply to the message's `Eru-Reply-To`, when it has one."""
        if not delivery.reply_to:
            return
        try:
            kind = JSON if media_type(delivery.content_type or None) == JSON else MSGPACK
        except InvalidInput:
            kind = MSGPACK
        details: dict[str, Any] = {"field": failure.field} if failure.field else {}
        error = EruError(failure.message or failure.reason, code=failure.code, **details)
        try:
            await send_reply(
                self.js._nc, delivery.reply_to, error, causation=envelope, source=self.source, content_type=kind
            )
        except Exception as problem:
            self._log.warning("bus.reply_failed", error=describe(problem))


async def consume(
    js: JetStreamContext,
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
