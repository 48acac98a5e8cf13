"""Talking to the distributor, and the records of a placement: the decision's input and the wire allocation."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Protocol

from eru.bus import Envelope, RemoteError, RequestTimeout, Retryable
from eru.bus.codec import MSGPACK, decode_value, encode_value
from eru.bus.codec import validate as validate_model
from eru.bus.envelope import H_CONTENT_TYPE
from eru.bus.errors import NoResponders
from eru.bus.protocol import Bus
from eru.bus.subjects import DISTRIBUTOR_PLACE, DISTRIBUTOR_PLACE_BATCH
from eru.domain import Allocation, DeployRequest, PlaceBatchReply, PlaceReply
from eru.errors import EruError, InvalidInput, PlanningFailure
from eru.planning import ContainerPlan, NormalizedRequest, PlanningConfig
from eru.planning.distribute import SlotColumns, place_columns


async def place_request(bus: Bus, reply_within: float, place: dict[str, Any], envelope: Envelope) -> PlaceReply:
    """One request/reply with the distributor (over nats-py's shared reply subscription in service: no per-request
    inbox subscription, no flush round trip). `NoResponders` / `RequestTimeout` come from the bus seam."""
    return validate_model(await _distributor_call(bus, DISTRIBUTOR_PLACE, reply_within, place, envelope), PlaceReply)


async def _distributor_call(
    bus: Bus, subject: str, reply_within: float, body: dict[str, Any], envelope: Envelope
) -> Any:
    headers = {**envelope.to_headers(), H_CONTENT_TYPE: MSGPACK}
    msg = await bus.request(subject, encode_value(body), reply_within=reply_within, headers=headers)
    value = decode_value(msg.data, MSGPACK)
    if isinstance(value, dict) and value.get("status") == "error":
        details = value.get("details")
        raise RemoteError(
            str(value.get("code") or "error"),
            str(value.get("message") or "error"),
            details if isinstance(details, dict) else {},
        )
    return value


async def ask_distributor(
    bus: Bus,
    source: str,
    reply_within: float,
    req: DeployRequest,
    slots: SlotColumns | Sequence[Any],
    envelope: Envelope,
    options: dict[str, Any],
) -> dict[str, int]:
    """The distributor's placement for `req` over `slots` (docs/placement-modes.md); `PlanningFailure` when the mode
    cannot place it, `InvalidInput` for what the distributor finds malformed, `Retryable` when no distributor
    answers."""
    place = place_wire(req, slots, options)
    try:
        reply = await place_request(bus, reply_within, place, envelope.caused("eru.distributor.place", source))
    except (RequestTimeout, NoResponders) as error:
        raise Retryable(f"distributor unavailable: {error.message}", delay=1.0) from None
    except RemoteError as error:
        if error.code == "invalid_input":
            field = str(error.details.get("field") or "mode")
            raise InvalidInput(field, error.message.removeprefix(f"{field}: ")) from None
        if error.code in ("handler_error", "internal", "unavailable", "store_unavailable"):
            raise Retryable(f"distributor failed: {error.message}", delay=1.0) from None
        details = {k: v for k, v in error.details.items() if k not in ("code", "message")}
        raise PlanningFailure(error.message, code=error.code, **details) from None
    return dict(reply.placements)


def place_wire(
    req: DeployRequest, slots: SlotColumns | Sequence[Any], options: dict[str, Any], *, names: bool = True
) -> dict[str, Any]:
    """The wire form of a `PlaceRequest`, built directly: the nodes as columns (docs/planning.md "Per-batch cost":
    a few lists, not an object per node), which come from the planning core and are valid; a deploy request sends
    one of these inside the pod lock (the distributor validates what it receives). `names=False`: left out, for a
    batch that carries them once."""
    columns = slots if isinstance(slots, SlotColumns) else SlotColumns.from_slots(slots)
    return {
        "mode": req.mode,
        "count": req.count,
        "nodes_limit": req.nodes_limit,
        "options": options,
        "columns": columns.wire(names=names),
    }


def batch_wire(asks: Sequence[tuple[dict[str, Any], Sequence[str]]]) -> list[dict[str, Any]]:
    """The `place_batch` bodies for a batch's asks (each ask's columns without names, and its node names): the node
    names once per body (`PlaceBatchRequest.names`: a batch's requests see the same nodes; an ask that sees others
    starts a new body), and a body ends before its columns pass `MAX_CALL_BYTES` (under the bus's body limit)."""
    bodies: list[dict[str, Any]] = []
    current: list[dict[str, Any]] = []
    shared: Sequence[str] = ()
    size = 0
    for ask, names in asks:
        same = bool(current) and (names is shared or names == shared)
        cost = len(names) * (COLUMN_BYTES + (FRACTION_BYTES if "usage" in ask["columns"] else 0))
        if current and (not same or size + cost > MAX_CALL_BYTES or len(current) >= MAX_ASKS_PER_CALL):
            bodies.append({"names": list(shared), "asks": current})
            current = []
        if not current:
            shared = names
            size = sum(len(name) for name in names) + 2 * len(names)
        current.append(ask)
        size += cost
    if current:
        bodies.append({"names": list(shared), "asks": current})
    return bodies


class DistributorLink(Protocol):
    """What placing needs of the deploy path's context (`eru_allocator.deploy.context.Context`): the bus, this
    replica's source name and how long the distributor may take."""

    @property
    def bus(self) -> Bus:
        """The bus seam the distributor is asked over."""
        ...

    @property
    def source(self) -> str:
        """This replica's name on the envelopes it sends."""
        ...

    @property
    def place_timeout_seconds(self) -> float:
        """How long one distributor request may take."""
        ...


class Placer(Protocol):
    """Where a deploy's placement comes from (docs/pipeline.md, "Performance")."""

    async def place(
        self,
        ctx: DistributorLink,
        req: DeployRequest,
        slots: SlotColumns | Sequence[Any],
        envelope: Envelope,
        options: dict[str, Any],
    ) -> dict[str, int]:
        """New instances per node for `req` over `slots`; raises like `ask_distributor`."""
        ...


class DirectPlacer:
    """One distributor request per deploy request (admission passes, and a batch whose prediction failed)."""

    async def place(
        self,
        ctx: DistributorLink,
        req: DeployRequest,
        slots: SlotColumns | Sequence[Any],
        envelope: Envelope,
        options: dict[str, Any],
    ) -> dict[str, int]:
        """The distributor's answer for this request alone."""
        return await ask_distributor(ctx.bus, ctx.source, ctx.place_timeout_seconds, req, slots, envelope, options)


DIRECT = DirectPlacer()
MAX_CALL_BYTES = 512 * 1024  # a place_batch body's estimated columns, well under bus.max_body_bytes (1 MiB)
COLUMN_BYTES = 6  # msgpack of a node's capacity and count (integers up to 65,535 take 3 bytes each)
FRACTION_BYTES = 18  # its usage and rate (two doubles), for the modes that read them
MAX_ASKS_PER_CALL = 1000  # PlaceBatchRequest.asks' bound


class PredictingPlacer:
    """A batch's placements, asked of the distributor once (docs/pipeline.md, "Performance").

    Request n + 1 of a batch is staged against the snapshot as request n's plan left it, so its slots need request
    n's placements first. `place` answers with the placement mode run here (the same pure `eru.planning.distribute`
    the distributor runs) and keeps the ask; `confirm` sends every ask in one `eru.distributor.place_batch` request
    and says whether the distributor's answers are the predicted ones. Only then is the batch submitted: the
    distributor stays the service that applies placement modes, and every decision records its request's own slots.
    """

    def __init__(self) -> None:
        self.asks: list[tuple[dict[str, Any], Sequence[str]]] = []  # (the ask without names, its node names)
        self.predicted: list[dict[str, int] | EruError] = []
        self.cause: Envelope | None = None

    async def place(
        self,
        ctx: DistributorLink,
        req: DeployRequest,
        slots: SlotColumns | Sequence[Any],
        envelope: Envelope,
        options: dict[str, Any],
    ) -> dict[str, int]:
        """The predicted placement (or the mode's error, raised as the distributor's would be)."""
        self.cause = self.cause or envelope
        columns = slots if isinstance(slots, SlotColumns) else SlotColumns.from_slots(slots)
        self.asks.append((place_wire(req, columns, options, names=False), columns.names))
        try:
            placements = place_columns(req.mode, columns, req.count, req.nodes_limit, options)
        except EruError as error:
            self.predicted.append(error)
            raise
        self.predicted.append(placements)
        return placements

    async def confirm(self, ctx: DistributorLink) -> int | None:
        """Ask the distributor for every placement; the index of the first answer that differs from its prediction
        (None: all agree). `Retryable` when no distributor answers."""
        if not self.asks or self.cause is None:
            return None
        envelope = self.cause.caused("eru.distributor.place_batch", ctx.source)
        calls = [
            _distributor_call(ctx.bus, DISTRIBUTOR_PLACE_BATCH, ctx.place_timeout_seconds, body, envelope)
            for body in batch_wire(self.asks)
        ]
        try:
            replies = await asyncio.gather(*calls)
        except (RequestTimeout, NoResponders, RemoteError) as error:
            raise Retryable(f"distributor unavailable: {error.message}", delay=1.0) from None
        results = [result for reply in replies for result in validate_model(reply, PlaceBatchReply).results]
        if len(results) != len(self.predicted):
            return min(len(results), len(self.predicted))
        for index, (predicted, outcome) in enumerate(zip(self.predicted, results, strict=True)):
            if isinstance(predicted, EruError):
                answered = outcome.error or {}
                if answered.get("code") != predicted.code or answered.get("message") != predicted.message:
                    return index
            elif outcome.placements != predicted:
                return index
        return None


AskKey = tuple[bytes, tuple[str, ...]]
"""An ask as the distributor receives it (its wire body, packed, and its node names): equal keys, equal answers."""
Answer = dict[str, int] | EruError
"""The distributor's answer to one ask: placements, or the mode's error as the deploy sees it."""


class KnownPlacer:
    """A batch decided from the distributor's answers already had (docs/pipeline.md "The pod lock and the
    distributor").

    The distributor is a pure function of the ask it receives (the mode run over the columns sent), so an answer
    given to an ask holds for the same ask later. `place` answers an ask made before from `known`; an ask never made
    is answered with the prediction (the same pure `eru.planning.distribute`) and kept in `missing`, to be asked of
    the distributor by `confirm` (one `eru.distributor.place_batch` request) without the pod's lock. A decision
    whose asks were all known is the one the distributor's own answers give, and may be submitted. `direct`: an ask
    never made is asked of the distributor at once, alone (`eru.distributor.place`, as `DirectPlacer`), for a batch
    whose predictions the distributor contradicted; only without the pod's lock."""

    def __init__(self, known: dict[AskKey, Answer], *, direct: bool = False) -> None:
        self.known = known
        self.direct = direct
        self.missing: list[tuple[AskKey, dict[str, Any], Sequence[str], Answer]] = []  # (key, ask, names, predicted)
        self.cause: Envelope | None = None

    async def place(
        self,
        ctx: DistributorLink,
        req: DeployRequest,
        slots: SlotColumns | Sequence[Any],
        envelope: Envelope,
        options: dict[str, Any],
    ) -> dict[str, int]:
        """The distributor's answer to this very ask if known, else the prediction (recorded as missing)."""
        self.cause = self.cause or envelope
        columns = slots if isinstance(slots, SlotColumns) else SlotColumns.from_slots(slots)
        ask = place_wire(req, columns, options, names=False)
        key = (encode_value(ask), tuple(columns.names))
        answer = self.known.get(key)
        if answer is None and self.direct:
            try:
                answer = await ask_distributor(
                    ctx.bus, ctx.source, ctx.place_timeout_seconds, req, columns, envelope, options
                )
            except (PlanningFailure, InvalidInput) as error:
                answer = error
            self.known[key] = answer
        if answer is None:
            try:
                answer = place_columns(req.mode, columns, req.count, req.nodes_limit, options)
            except EruError as error:
                answer = error
            self.missing.append((key, ask, columns.names, answer))
        if isinstance(answer, EruError):
            raise answer
        return dict(answer)

    async def confirm(self, ctx: DistributorLink) -> bool:
        """Ask the distributor every missing ask (outside the pod's lock) and keep its answers in `known`; whether
        they all are the predicted ones (then the decision made stands). `Retryable` when no distributor answers."""
        if not self.missing or self.cause is None:
            return True
        envelope = self.cause.caused("eru.distributor.place_batch", ctx.source)
        calls = [
            _distributor_call(ctx.bus, DISTRIBUTOR_PLACE_BATCH, ctx.place_timeout_seconds, body, envelope)
            for body in batch_wire([(ask, names) for _, ask, names, _ in self.missing])
        ]
        try:
            replies = await asyncio.gather(*calls)
        except (RequestTimeout, NoResponders, RemoteError) as error:
            raise Retryable(f"distributor unavailable: {error.message}", delay=1.0) from None
        results = [result for reply in replies for result in validate_model(reply, PlaceBatchReply).results]
        if len(results) != len(self.missing):
            raise Retryable("the distributor answered a different number of asks", delay=1.0)
        agreed = True
        for (key, _, _, predicted), outcome in zip(self.missing, results, strict=True):
            answered = _answer_of(outcome.error, outcome.placements, predicted)
            self.known[key] = answered
            agreed = agreed and answered is predicted
        self.missing = []
        return agreed


def _answer_of(error: dict[str, Any] | None, placements: dict[str, int] | None, predicted: Answer) -> Answer:
    """The distributor's outcome as an `Answer`: `predicted` itself when it is the same (placements, or an error
    of the same code and message, as `PredictingPlacer.confirm` compares them), else what it says, raised as
    `ask_distributor` raises it."""
    if error is None:
        answered = dict(placements or {})
        return predicted if answered == predicted else answered
    code, message = str(error.get("code") or "error"), str(error.get("message") or "error")
    if isinstance(predicted, EruError) and predicted.code == code and predicted.message == message:
        return predicted
    details = error.get("details")
    details = details if isinstance(details, dict) else {}
    if code == "invalid_input":
        field = str(details.get("field") or "mode")
        return InvalidInput(field, message.removeprefix(f"{field}: "))
    return PlanningFailure(message, code=code, **{k: v for k, v in details.items() if k not in ("code", "message")})


def allocation_of(plan: ContainerPlan, normalized: NormalizedRequest, config: PlanningConfig) -> Allocation:
    """The wire allocation of one planned instance (cpuset, shares, quota and memory for the node agent)."""
    return Allocation(
        cpu_map=dict(plan.cpu_map),
        numa_node=plan.numa_node,
        memory=plan.memory,
        share_base=config.share_base,
        cpu_bind=normalized.cpu_bind,
        cpu_limit=normalized.cpu_limit / config.share_base,
        memory_limit=normalized.memory_limit,
        memory_soft=normalized.memory_soft,
    )
