"""Workloads that keep their count (docs/colocation.md "Batch workloads keep their count"; a service deployed with
`keep` too: its instances lost with a down node are placed again, docs/node-agent.md "Health and node TTL").

Every `keep_interval_seconds` one allocator replica (a transaction-scoped advisory lock) runs one round:

1. records the evictions of batch containers (removed by an eviction decision) in `evictions` — the input of the
   eviction memory every later batch placement reads;
2. adopts the containers of kept deploys (`keep: true`) as logical instances (`kept_instances`);
3. for an instance whose container is gone: evicted → waits `30 s × 2^k` (k = its evictions within the hour,
   capped) or, at the maximum, gives up; failed (lost) → waits the base delay; removed otherwise (someone removed
   it) → no longer kept;
4. an instance whose wait is over is placed again by a new deploy request (`keep-<lineage>-<generation>`, count 1,
   through the outbox to `eru.deploy.request`): the ordinary allocator path, its own recorded, replayable decision;
5. a re-placement that got its container runs again; one that failed waits again.

Each step is announced as a `DeployEvent` of kind `keep` (carrying a `KeepEvent`) on
`eru.deploy.<kept deploy>.keep`. The delays are the pure
`eru.colocation.backoff` functions over the recorded times; `now` is PostgreSQL's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import structlog

from eru import telemetry
from eru.activity import ACTIVITY
from eru.bus import new_envelope
from eru.bus.subjects import DEPLOY_REQUEST, deploy_event
from eru.colocation.backoff import KeepConfig, gives_up, replacement_delay
from eru.colocation.budget import parse_budget
from eru.domain import DeployEvent, DeployRequest
from eru.domain.messages import KeepEvent
from eru.errors import InvalidInput
from eru.store.kept import KeeperRound, KeptInstanceStore
from eru.store.protocol import OutboxMessage

log = structlog.get_logger()

EVICTED_MARK = " eviction (decision "  # the reason the eviction service gives its evict commands


def check_keep(request: DeployRequest, batch: bool) -> None:
    """`eviction_budget` is for batch workloads (`keep` is for any: a service's instances lost with their node are
    placed again too), and the budget must parse (`InvalidInput` naming the field, e.g.
    `workload.eviction_budget.max_unavailable`)."""
    budget = request.workload.eviction_budget
    if budget:
        if not batch:
            raise InvalidInput("workload.eviction_budget", "only batch workloads are evicted: set priority_class batch")
        parse_budget(budget, "workload.eviction_budget")


class Keeper:
    """One allocator replica's keeper; `run` until stopped, `round` once (tests)."""

    def __init__(
        self, store: KeptInstanceStore, source: str, config: KeepConfig, *, wait_seconds: float = 600.0
    ) -> None:
        self.store = store
        self.source = source
        self.config = config
        self.wait_seconds = wait_seconds

    async def run(self, stopping: asyncio.Event, interval: float, active: Callable[[], bool] | None = None) -> None:
        """A round every `interval` seconds while `active()` says so (the allocator: the lead replica, so three
        replicas do not run three rounds per interval: docs/replicas.md "One replica relays"); a failing round is
        logged and retried, never fatal."""
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), interval)
            if stopping.is_set():
                return
            if active is not None and not active():
                continue
            try:
                await self.round()
            except Exception as error:
                log.warning("keeper.round_failed", error=f"{type(error).__name__}: {error}")

    async def round(self) -> bool:
        """One round (False when another replica holds the keeper's lock)."""
        async with self.store.keeper_round() as kept:
            if kept is None:
                return False
            now = kept.now
            await kept.record_evictions(EVICTED_MARK, self.config.avoid_decay_seconds)
            await kept.adopt()
            messages: list[OutboxMessage] = []
            await self._gone(kept, now, messages)
            await self._placing(kept, now, messages)
            await self._due(kept, now, messages)
            await kept.queue(messages)
        return True

    def _event(self, messages: list[OutboxMessage], event: KeepEvent) -> None:
        envelope = new_envelope("eru.deploy.keep", self.source, correlation_id=event.deploy_id)
        wrapped = DeployEvent(deploy_id=event.deploy_id, kind="keep", keep=event)
        messages.append(OutboxMessage(deploy_event(event.deploy_id, "keep"), wrapped, envelope))
        ACTIVITY.count(f"keeper.{event.kind}")
        log.debug("keeper.event", deploy_id=event.deploy_id, lineage=event.lineage, kind=event.kind)

    async def _gone(self, kept: KeeperRound, now: float, messages: list[OutboxMessage]) -> None:
        for row in await kept.gone():
            times = list(row.evictions)
            lineage, deploy_id = row.lineage, row.deploy_id
            reason = row.reason or row.state
            if row.state == "removed" and EVICTED_MARK in f" {reason}":
                at = row.at
                times.append(at)
                if gives_up(times, self.config):
                    await kept.move(lineage, "gave_up", None, times)
                    telemetry.COLOCATION_GIVE_UPS.labels(row.workload).inc()
                    self._event(
                        messages,
                        KeepEvent(
                            deploy_id=deploy_id,
                            lineage=lineage,
                            kind="gave_up",
                            container_id=row.container_id,
                            evictions=len(times),
                            reason=f"evicted {len(times)} times (maximum {self.config.max_evictions})",
                        ),
                    )
                    continue
                delay = replacement_delay(times, at, self.config)
                kind = "evicted"
            elif row.state in ("failed", "lost"):  # lost: its node no longer ran it (docs/operations.md)
                delay, kind = self.config.replace_base_seconds, "lost"
            else:
                await kept.move(lineage, "done", None, times)
                continue
            due = max(now, row.at) + delay if kind == "lost" else row.at + delay
            await kept.move(lineage, "waiting", due, times)
            self._event(
                messages,
                KeepEvent(
                    deploy_id=deploy_id,
                    lineage=lineage,
                    kind=kind,
                    container_id=row.container_id,
                    evictions=len(times),
                    due_in_seconds=round(max(0.0, due - now), 3),
                    reason=reason,
                ),
            )

    async def _due(self, kept: KeeperRound, now: float, messages: list[OutboxMessage]) -> None:
        for row in await kept.due(now):
            wanted = row.request
            times = list(row.evictions)
            generation = row.generation + 1
            request_id = f"keep-{row.lineage}-{generation}"
            request = wanted.model_copy(
                update={
                    "request_id": request_id,
                    "count": 1,
                    "keep": False,
                    "desired": wanted.desired or wanted.count,
                    "evictions": len(times),
                    "wait_seconds": max(wanted.wait_seconds, self.wait_seconds),
                }
            )
            envelope = new_envelope("eru.deploy.request", self.source, correlation_id=row.deploy_id)
            messages.append(OutboxMessage(DEPLOY_REQUEST, request, envelope))
            await kept.move(row.lineage, "placing", None, times, request_id=request_id, next_generation=True)
            telemetry.COLOCATION_REPLACEMENTS.labels(wanted.workload.name).inc()
            self._event(
                messages,
                KeepEvent(
                    deploy_id=row.deploy_id,
                    lineage=row.lineage,
                    kind="replacing",
                    evictions=len(times),
                    request_id=request_id,
                ),
            )

    async def _placing(self, kept: KeeperRound, now: float, messages: list[OutboxMessage]) -> None:
        for row in await kept.placing():
            times = list(row.evictions)
            if row.container_id is not None:
                await kept.move(row.lineage, "running", None, times, container_id=row.container_id)
                self._event(
                    messages,
                    KeepEvent(
                        deploy_id=row.deploy_id,
                        lineage=row.lineage,
                        kind="placed",
                        container_id=row.container_id,
                        evictions=len(times),
                        request_id=row.request_id,
                    ),
                )
            elif row.status == "failed":
                due = now + self.config.replace_base_seconds
                await kept.move(row.lineage, "waiting", due, times)
