"""Request/reply with typed messages: `request` on the caller's side, `serve` (a queue group) on the responder's.

A reply is either the reply model or an error `{"status": "error", "code", "message", "details"}` (the shape of
`eru.domain.messages.ErrorReply`); `request` raises `RemoteError` for the latter. Replies use the request's content
type, so a JSON client gets JSON back.

When the request subject is also captured by a JetStream stream (`eru.deploy.request`), the stream's `PubAck` reaches
the reply inbox first; `request` skips it and waits for the real answer, which the consuming service sends to the
`Eru-Reply-To` header that `request` sets (see `reply_to_delivery`).

A core-NATS reply is sent at most once: one sent while the caller's connection is reconnecting (its server died) is
lost. With `ask_again_after`, `request` asks again when no reply came in that long (then twice as long, …): the same
body — so the same request id, which the deploy consumer answers from what it settled — under a new message id, so
the stream's duplicate window does not drop it as a repeat (docs/deploy.md "Clients: ask again with the same request
id").
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import structlog
from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeoutError
from pydantic import BaseModel

from eru import telemetry
from eru.bus.codec import JSON, MSGPACK, check_payload, decode_value, encode, media_type, to_wire, validate
from eru.bus.connection import describe, settle, violations_since
from eru.bus.consumer import Delivery
from eru.bus.errors import NoResponders, RemoteError, RequestTimeout
from eru.bus.replies import H_REPLY_TO as H_REPLY_TO
from eru.bus.replies import HEADER_ROOM, max_payload
from eru.bus.replies import send_reply as send_reply
from eru.envelope import H_CONTENT_TYPE, H_ID, Envelope, new_envelope
from eru.errors import EruError, InvalidInput, PermissionDenied
from eru.retry import is_store_outage, is_transient, retry_transient

log = structlog.get_logger()

ModelT = TypeVar("ModelT", bound=BaseModel)
ReplyT = TypeVar("ReplyT", bound=BaseModel)
_NATS_STATUS = "Status"
_NO_RESPONDERS = "503"
_DENIAL_CHECK_SECONDS = 0.1

Responder = Callable[[ModelT, Envelope], Awaitable[BaseModel]]
# A responder on a wildcard subject that needs the concrete subject (a tenant-scoped one: the tenant is a token).
SubjectResponder = Callable[[ModelT, Envelope, str], Awaitable[BaseModel]]


def _is_pub_ack(msg: Any) -> bool:
    if (msg.headers or {}).get(H_ID):
        return False
    try:
        value = json.loads(msg.data)
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(value, dict) and "stream" in value and "seq" in value


def _reply_of(msg: Any, reply_type: type[ReplyT], subject: str) -> ReplyT:
    content_type = media_type((msg.headers or {}).get(H_CONTENT_TYPE) or None)
    try:
        value = decode_value(msg.data, content_type)
    except InvalidInput as error:
        raise RemoteError("bad_reply", f"reply from {subject} is unreadable: {error.message}") from None
    if isinstance(value, dict) and value.get("status") == "error":
        details = value.get("details")
        raise RemoteError(
            str(value.get("code") or "error"),
            str(value.get("message") or "error without a message"),
            details if isinstance(details, dict) else {},
        )
    return validate(value, reply_type)


async def request(
    nc: Client,
    subject: str,
    model: BaseModel,
    reply_type: type[ReplyT],
    timeout: float,  # noqa: ASYNC109 - the reply deadline is part of the call, as in nc.request
    *,
    envelope: Envelope | None = None,
    source: str = "eru",
    content_type: str | None = None,
    ask_again_after: float | None = None,
) -> ReplyT:
    """Send `model` to `subject` and return the typed reply.

    With `ask_again_after`, `model` is sent again (new message id, same body) each time that many seconds pass
    without a reply, the wait doubling each time, until `timeout`: only for requests that carry their own
    idempotency key (a deploy's `request_id`), which makes a repeat answer what the first ask did.

    Raises `RemoteError` (an error reply, with its code, message and details), `RequestTimeout` (nothing within
    `timeout` seconds), `NoResponders` (nobody serves the subject), `PermissionDenied` (the server refused this
    user the subject or the reply inbox) or `InvalidInput` (a reply that does not validate).
    """
    envelope = envelope or new_envelope(f"{subject}.request", source)
    kind = media_type(content_type or MSGPACK)
    inbox = nc.new_inbox()
    headers = {**envelope.to_headers(), H_CONTENT_TYPE: kind, H_REPLY_TO: inbox}
    mark = len(getattr(nc, "violations", []))
    body = encode(model, kind)
    # nats-py would raise a bare MaxPayloadError (the server counts the headers too): name the field that made the
    # message too big instead
    check_payload(body, to_wire(model), max_payload(nc) - HEADER_ROOM)
    subscription = await nc.subscribe(inbox)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    wait = ask_again_after
    ask_at = loop.time() + wait if wait else deadline
    try:
        await nc.publish(subject, body, reply=inbox, headers=headers)
        # The server answers a denied publish or subscription with -ERR (and drops the message): usually before
        # the flush's PONG, but nats-py may write that PING ahead of the PUB (see `settle`), so the wait for the
        # reply looks again every fraction of a second.
        # nats-py annotates the timeout `int`; it takes any positive number of seconds (asyncio.wait_for)
        await nc.flush(timeout=max(timeout, 0.1))  # type: ignore[arg-type]
        while True:
            _raise_if_cancelled()  # a cancellation nats-py's flush or poll handed back as a result
            _raise_if_denied(nc, mark, subject, inbox)
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise TimeoutError
            if wait and loop.time() >= ask_at:  # no reply yet: perhaps lost while we reconnected, ask again
                again = new_envelope(envelope.type, envelope.source, envelope.correlation_id, envelope.causation_id)
                await nc.publish(subject, body, reply=inbox, headers={**headers, **again.to_headers()})
                wait *= 2
                ask_at = loop.time() + wait
                log.info("bus.request.asked_again", subject=subject, message_id=again.id, next_in=wait)
            try:
                msg = await subscription.next_msg(timeout=min(remaining, _DENIAL_CHECK_SECONDS))
            except (TimeoutError, NatsTimeoutError):
                _raise_if_cancelled()
                continue
            if (msg.headers or {}).get(_NATS_STATUS) == _NO_RESPONDERS:
                raise NoResponders(f"nobody serves {subject}", subject=subject)
            if _is_pub_ack(msg):
                continue
            _raise_if_cancelled()
            return _reply_of(msg, reply_type, subject)
    except (TimeoutError, NatsTimeoutError):
        _raise_if_cancelled()
        raise RequestTimeout(f"no reply from {subject} within {timeout:g}s", subject=subject, timeout=timeout) from None
    finally:
        with contextlib.suppress(Exception):
            await subscription.unsubscribe()


def _raise_if_cancelled() -> None:
    """Raise CancelledError when this task was asked to stop. nats-py's `next_msg` waits in a task of its own under
    `asyncio.wait_for`, which in Python 3.11 may answer a cancellation that meets its timeout with the timeout: the
    request then went on as if nothing had asked it to stop (`eru run` ignored a Ctrl-C that came while it waited
    for the attach reply every 0.1 s, and followed the container's logs forever)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _raise_if_denied(nc: Client, mark: int, subject: str, inbox: str) -> None:
    if violations_since(nc, mark, (subject,)) is not None:
        raise PermissionDenied(
            f"permission denied: this user may not send {subject} (docs/security.md)", subject=subject
        )
    if violations_since(nc, mark, (inbox,)) is not None:
        raise PermissionDenied(
            f"permission denied: this user may not read replies on {inbox} (connect with the inbox prefix of its "
            "user, docs/security.md)",
            subject=subject,
        )


async def reply_to_delivery(
    nc: Client, delivery: Delivery, envelope: Envelope, answer: BaseModel | EruError, *, source: str
) -> bool:
    """Answer a request that arrived through a JetStream consumer (its `Eru-Reply-To` header); False if none."""
    if not delivery.reply_to:
        return False
    content_type = JSON if media_type(delivery.content_type or None) == JSON else MSGPACK
    await send_reply(nc, delivery.reply_to, answer, causation=envelope, source=source, content_type=content_type)
    return True


class Server:
    """A responder in a queue group: every replica subscribes, each request reaches one of them."""

    def __init__(
        self,
        nc: Client,
        subject: str,
        model_type: type[ModelT],
        handler: Responder[ModelT] | SubjectResponder[ModelT],
        *,
        queue: str,
        source: str,
        concurrency: int = 16,
        retry_seconds: float = 120.0,
        with_subject: bool = False,
    ) -> None:
        self.nc = nc
        self.retry_seconds = retry_seconds
        self.subject = subject
        self.model_type: type[BaseModel] = model_type
        self.handler: Callable[..., Awaitable[BaseModel]] = handler
        self.with_subject = with_subject
        self.queue = queue
        self.source = source
        self.served = 0
        self._slots = asyncio.Semaphore(concurrency)
        self._in_flight: set[asyncio.Task[None]] = set()
        self._subscription: Any = None
        self._log = log.bind(subject=subject, queue=queue)

    async def start(self) -> None:
        """Subscribe to the subject in the queue group."""
        self._subscription = await self.nc.subscribe(self.subject, queue=self.queue, cb=self._on_message)
        await settle(self.nc)

    async def stop(self) -> None:
        """Stop taking requests and wait for the ones being answered."""
        if self._subscription is not None:
            with contextlib.suppress(Exception):
                await self._subscription.unsubscribe()
            self._subscription = None
        if self._in_flight:
            await asyncio.gather(*self._in_flight, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self.nc.flush(timeout=2)

    async def _on_message(self, msg: Any) -> None:
        await self._slots.acquire()
        task = asyncio.create_task(self._answer(msg))
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def _reply_for(
        self, msg: Any, headers: dict[str, str], kind: str
    ) -> tuple[BaseModel | EruError, Envelope | None]:
        """The answer to one request: the handler's reply, or the error naming what went wrong — never `internal`."""
        envelope: Envelope | None = None
        try:
            envelope = Envelope.from_headers(headers) if H_ID in headers else None
            model = validate(decode_value(msg.data, kind), self.model_type)
        except EruError as error:
            return error, envelope
        except Exception as error:  # whatever the decoder raises, the caller learns its body was at fault
            return InvalidInput("body", describe(error)), envelope
        envelope = envelope or new_envelope(self.subject, "external")
        request_envelope = envelope

        async def waiting(error: BaseException, wait: float, attempt: int) -> None:
            self._log.warning("bus.responder.transient_failure", error=describe(error), attempt=attempt, wait=wait)

        try:
            arguments = (model, request_envelope, msg.subject) if self.with_subject else (model, request_envelope)
            reply = await retry_transient(
                lambda: self.handler(*arguments), deadline_seconds=self.retry_seconds, on_retry=waiting
            )
        except Exception as error:
            if is_transient(error):
                code = "store_unavailable" if is_store_outage(error) else "unavailable"
                message = f"not done, {code.replace('_', ' ')} after {self.retry_seconds:g}s: {describe(error)}"
                self._log.error("bus.responder.gave_up", code=code, error=describe(error))
                return EruError(message, code=code), envelope
            if isinstance(error, EruError):
                return error, envelope
            self._log.exception("bus.responder.handler_error", error=describe(error))
            failed = f"the handler of {self.subject} failed: {type(error).__name__}"
            return EruError(failed, code="handler_error"), envelope
        return reply, envelope

    async def _answer(self, msg: Any) -> None:
        started = time.perf_counter()
        outcome = "error"
        try:
            headers = msg.headers or {}
            reply_subject = msg.reply or headers.get(H_REPLY_TO)
            envelope: Envelope | None = None
            answer: BaseModel | EruError
            try:
                kind = media_type(headers.get(H_CONTENT_TYPE) or None)
            except InvalidInput as error:
                kind, answer = MSGPACK, error
            else:
                answer, envelope = await self._reply_for(msg, headers, kind)
            if isinstance(answer, InvalidInput):  # the client's mistake (a typo, an unknown id): not the service's
                self._log.warning("bus.request.rejected", code=answer.code, field=answer.field, reason=answer.reason)
            if isinstance(answer, EruError):
                telemetry.ERRORS.labels(answer.code).inc()
            else:
                outcome = "ok"
            self.served += 1
            if reply_subject:
                await send_reply(
                    self.nc, reply_subject, answer, causation=envelope, source=self.source, content_type=kind
                )
        except Exception as error:
            self._log.error("bus.responder.reply_failed", error=describe(error))
        finally:
            self._slots.release()
            telemetry.REQUESTS.labels(self.subject, outcome).inc()
            telemetry.REQUEST_SECONDS.labels(self.subject).observe(time.perf_counter() - started)


async def serve(
    nc: Client,
    subject: str,
    model_type: type[ModelT],
    handler: Responder[ModelT] | SubjectResponder[ModelT],
    *,
    queue: str,
    source: str,
    concurrency: int = 16,
    retry_seconds: float = 120.0,
    with_subject: bool = False,
) -> Server:
    """Start answering `subject` in queue group `queue`; `handler(model, envelope)` (with `with_subject`:
    `handler(model, envelope, subject)`, the subject the request came on) returns the reply model or raises an
    `EruError` (sent as an error reply); transient failures are retried for `retry_seconds` (then
    `store_unavailable`), any other exception is answered `handler_error`. Call `await server.stop()` to stop."""
    server = Server(
        nc,
        subject,
        model_type,
        handler,
        queue=queue,
        source=source,
        concurrency=concurrency,
        retry_seconds=retry_seconds,
        with_subject=with_subject,
    )
    await server.start()
    return server
