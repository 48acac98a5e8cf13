"""Deploy requests (docs/pipeline.md): validate, then commit a pod's batch. Its requests are decided without the
pod's lock and confirmed by the distributor (`eru_allocator.deploy.confirm`, in process by
`eru_allocator.deploy.decision`); here the decision is submitted under the lock (`eru_allocator.deploy.loop`:
`submit_plan`, and the rejected part decided again) and the commands published.

The idempotency key is the client's `request_id`, or the request message's envelope id (stable across redeliveries),
so a redelivery, a client retry or a replica that died between commit and ack finds the deploy already made and
answers with it; `deploys.request_id` is unique, so two replicas can never both commit one key (`Conflict` at
submit: the batch is retried and answered from what the other one made).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable, Sequence

import structlog

from eru import telemetry
from eru.bus import Envelope, Retryable
from eru.domain import Accepted, DeployRequest
from eru.errors import EruError, InvalidInput
from eru.planning.snapshot import ClusterSnapshot
from eru.store.protocol import Conflict, SnapshotNeeds
from eru_allocator.deploy import loop
from eru_allocator.deploy.confirm import (
    Read,
    decide,
    decide_ahead,
    keys_of,
    may_wait,
    pod_refusal,
    read_pod,
    workloads_of,
)
from eru_allocator.deploy.context import Context, Item
from eru_allocator.deploy.plan_ahead import Ahead, Basis, Turn, may_plan_ahead
from eru_allocator.deploy.requests import validate
from eru_allocator.flow.batcher import Batcher, next_batch_may_start

log = structlog.get_logger()


async def deploy(
    ctx: Context, req: DeployRequest, envelope: Envelope, batcher: Batcher[Item, Accepted | EruError]
) -> Accepted | EruError:
    """Plan and commit one request; returns the answer for the client (an `EruError` is an error reply).

    Requests for one pod that arrive together are committed together (`commit_batch`). Raises `Retryable` when the
    distributor cannot be reached: nothing is committed and the request comes back.
    """
    try:
        normalized = validate(req, ctx.config)
    except InvalidInput as error:
        return error
    return await batcher.submit(req.pod, (req, normalized, envelope))


async def commit_batch(ctx: Context, pod: Hashable, items: Sequence[Item]) -> list[Accepted | EruError]:
    """Plan every request of the batch in arrival order, each against the pod as the previous ones left it, and
    submit them all in ONE transaction under the pod lock. While the previous batch of the pod commits, this one is
    planned ahead against the state that batch leaves (eru_allocator.deploy.plan_ahead)."""
    pod_name = str(pod)
    previous, turn = ctx.line.join(pod_name)
    try:
        return await _commit(ctx, pod_name, items, previous, turn)
    finally:
        ctx.line.leave(pod_name, turn)


async def _commit(
    ctx: Context, pod_name: str, items: Sequence[Item], previous: Turn | None, turn: Turn
) -> list[Accepted | EruError]:
    answers: list[Accepted | EruError] = []
    started = time.perf_counter()
    ahead: Ahead | None = None
    # asked while the previous batch commits; answered before this one looks its keys up (a replayed dead letter)
    recorded = asyncio.ensure_future(ctx.dead_letters.wait()) if ctx.dead_letters is not None else None
    try:
        if previous is not None:
            basis = await previous.planned
            if basis is not None and ctx.plan_ahead and may_plan_ahead(items):
                ahead = await decide_ahead(ctx, pod_name, items, basis)
            await previous.done
        if recorded is not None:
            await recorded
    finally:
        if recorded is not None and not recorded.done():
            recorded.cancel()
    try:
        async with ctx.store.deploy_batch(pod_name) as session:  # locked by open_batch, its first statement
            keys = keys_of(items)
            needs = SnapshotNeeds(
                ctx.config,
                ctx.node_down_after_seconds,
                score=any(req.mode == "score" for req, _, _ in items),
                batch=any(normalized.batch for _, normalized, _ in items),
                keep=ctx.keep,
                workloads=workloads_of(items),
                labels=any(req.node_filter is not None for req, _, _ in items),
            )
            # decided ahead: read under the lock, to be compared; else read without it, decided and confirmed by
            # the distributor, then compared with the pod read under the lock (`decide`)
            read = await read_pod(session, keys, needs, items, lock=ahead is not None)
            refused = await pod_refusal(session, pod_name, read, items)
            if refused is not None:
                return refused
            if ahead is not None and ahead.holds(read.policy or {}, read.existing, read.snapshot):
                state, answers = ahead.state, ahead.answers  # decided against exactly this state
                ctx.line.ahead_used += 1
                if ctx.publisher is not None:  # published from here right after the commit, not by the relay
                    state.writes.hold_seconds = ctx.publisher.hold_seconds
            else:
                if ahead is not None:
                    ctx.line.ahead_missed += 1
                made = await decide(ctx, session, pod_name, read, items, needs, locked=ahead is not None)
                if isinstance(made, list):
                    return made
                state, answers, read = made
            planned = time.perf_counter()
            turn.plan_known(Basis(read.policy or {}, state.snapshot))  # the next batch may plan against it now
            next_batch_may_start()

            async def replan(refreshed: ClusterSnapshot, indexes: tuple[int, ...]) -> loop.Decided:
                again = [items[index] for index in indexes]
                waits = await session.has_waiting() if may_wait(again) else None
                basis = Read(read.policy, {}, refreshed, waits)
                redecided = await decide(ctx, session, pod_name, basis, again, needs, locked=True)
                if isinstance(redecided, list):  # the pod went or its policy became invalid meanwhile
                    raise Retryable("the pod changed while its batch was submitted; retrying", delay=0.1)
                decision, replies, _ = redecided
                return loop.Decided(decision, replies, indexes)

            decided = loop.Decided(state, answers, tuple(range(len(items))))
            done = await loop.submit_until_placed(session, pod_name, needs, decided, replan, keys)
            answers = done.answers
        if done.first_committed:  # its snapshot row is written: a full one may serve as the next batches' base
            state.records.stored()
        if ctx.publisher is not None:  # before the answers: a client that acts on its reply finds the commands sent
            for written in done.written:
                if written.hold_seconds is not None:
                    await ctx.publisher.publish(written.messages, {row.id: row.tenant for row in written.deploys})
        placed = sum(len(written.containers) for written in done.written)
        telemetry.ALLOCATIONS.labels(pod_name).inc(placed)  # counted once committed
        log.debug(
            "deploy.batch",
            pod=pod_name,
            requests=len(items),
            ahead=ahead is not None and state is ahead.state,
            rounds=done.rounds,
            plan_seconds=round(planned - started, 4),
            distributor_seconds=round(state.distributor_seconds, 4),
            total_seconds=round(time.perf_counter() - started, 4),
        )
    except Conflict:
        # a key committed meanwhile by another replica (another pod's lock): the retry answers with what it made
        raise Retryable("a request id of this batch was committed concurrently; retrying", delay=0.1) from None
    return answers
