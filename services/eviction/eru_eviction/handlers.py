"""The eviction engine: route each metrics sample to its node's tracker and publish what the policy decided.

Samples arrive on core NATS (`eru.metrics.*`, every replica subscribed); a replica decodes only the samples of nodes
whose partition it holds, so each node's window lives in exactly one replica. Per sample, in this order: the node
commands (CFS quota `update`s, `evict`s) to `eru.node.<node>.cmd.<kind>`, the decision events to
`eru.eviction.<node>`, then the node condition to `eru.node.<node>.condition`, all stored in JetStream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog
from nats.js import JetStreamContext

from eru.bus import decode, new_envelope, publish
from eru.bus.codec import media_type, validate
from eru.bus.envelope import H_CONTENT_TYPE, H_ID
from eru.bus.history import read_stream
from eru.bus.streams import METRICS
from eru.bus.subjects import eviction, node_command, node_condition
from eru.colocation.config import ColocationConfig, resolve_config
from eru.colocation.outcome import Outcome
from eru.colocation.overrides import effective_config
from eru.colocation.tracker import NodeTracker
from eru.domain import NodeMetrics
from eru.domain.messages import WatermarkOverride
from eru.errors import InvalidInput
from eru.settings import EvictionSettings
from eru_eviction.budgets import BudgetBook
from eru_eviction.claims import claim_budgets, count_decision

log = structlog.get_logger()

SKIPS_PER_YIELD = 64  # a skipped sample costs microseconds: yielding after each would double that


class ConfigResolver:
    """Each node's configuration: defaults < `watermarks` < `pods.<pod>` < `nodes.<node>` (validated at start) <
    the live overrides of its pod < of the node (`eru pod|node set --watermark`, docs/colocation.md)."""

    def __init__(self, settings: EvictionSettings) -> None:
        self.settings = settings
        self.environment = settings.model_dump(include={"watermarks", "pods", "nodes"})
        base = ("eviction.watermarks", settings.watermarks)
        resolve_config(base)
        for pod, values in settings.pods.items():
            resolve_config(base, (f"eviction.pods.{pod}", values))
        for node, values in settings.nodes.items():
            resolve_config(base, (f"eviction.nodes.{node}", values))
        self.overrides: dict[tuple[str, str], WatermarkOverride] = {}
        self._cache: dict[tuple[str, str | None], ColocationConfig] = {}
        self._refused: set[tuple[str, str | None, int, int]] = set()

    def for_node(self, node: str, pod: str | None) -> ColocationConfig:
        """The merged configuration of one node without overrides; `InvalidInput` naming the layer on a clash."""
        return resolve_config(
            ("eviction.watermarks", self.settings.watermarks),
            (f"eviction.pods.{pod}", self.settings.pods.get(pod) if pod else None),
            (f"eviction.nodes.{node}", self.settings.nodes.get(node)),
        )

    def apply(self, override: WatermarkOverride) -> bool:
        """Take a newer override (an older or repeated version changes nothing); True when it changed something."""
        key = (override.scope, override.name)
        known = self.overrides.get(key)
        if known is not None and known.version >= override.version:
            return False
        self.overrides[key] = override
        self._cache.clear()
        return True

    def effective(self, node: str, pod: str | None) -> ColocationConfig:
        """The node's configuration with its pod's and its own overrides (cached until an override changes). An
        override this replica's environment does not accept (the allocator validated it with its own settings) is
        logged once and left out: the node keeps the configuration without overrides."""
        key = (node, pod)
        found = self._cache.get(key)
        if found is not None:
            return found
        pod_override = self.overrides.get(("pod", pod)) if pod else None
        node_override = self.overrides.get(("node", node))
        try:
            found = effective_config(
                self.environment,
                node,
                pod,
                pod_override.settings if pod_override else None,
                node_override.settings if node_override else None,
            )
        except InvalidInput as error:
            versions = (pod_override.version if pod_override else 0, node_override.version if node_override else 0)
            if (node, pod, *versions) not in self._refused:
                self._refused.add((node, pod, *versions))
                log.error("eviction.watermarks.refused", node=node, field=error.field, reason=error.reason)
            found = self.for_node(node, pod)
        self._cache[key] = found
        return found


@dataclass
class EngineStats:
    """Counters for the service's load report and the benchmark."""

    samples: int = 0
    skipped: int = 0
    rejected: int = 0
    ignored: int = 0
    commands: int = 0
    events: int = 0
    conditions: int = 0
    publish_failures: int = 0


class EvictionEngine:
    """Per-node trackers of the nodes this replica owns, and the publishing of their outcomes."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        replica: str,
        settings: EvictionSettings,
        owns: Callable[[str], bool] = lambda node: True,
        clock: Callable[[], float] = time.time,
        load: dict[str, float] | None = None,
        budgets: BudgetBook | None = None,
    ) -> None:
        self.js = js
        self.replica = replica
        self.settings = settings
        self.resolver = ConfigResolver(settings)
        self.owns = owns
        self.clock = clock
        self.source = f"eviction/{replica}"
        self.trackers: dict[str, NodeTracker] = {}
        self.stats = EngineStats()
        self.load = load if load is not None else {}
        self._broken: set[tuple[str, str]] = set()
        self._publishing: dict[str, asyncio.Task[None]] = {}
        self.budgets = budgets  # shared eviction budgets (None: each decision sees only this replica's evictions)
        self.pods: dict[str, str | None] = {}

    def longest_window(self) -> float:
        """The longest window any pod or node is configured with (how far back a takeover reads)."""
        settings = self.settings
        windows = [self.resolver.for_node("-", None).window_seconds]
        windows += [self.resolver.for_node("-", pod).window_seconds for pod in settings.pods]
        windows += [self.resolver.for_node(node, None).window_seconds for node in settings.nodes]
        return max(windows)

    async def rebuild(self, taken: Callable[[str], bool]) -> int:
        """Replay the last window of ERU_METRICS for the nodes `taken` over (a takeover, a restart); returns samples.

        Live samples keep arriving meanwhile; the window sorts the two flows out (late samples are inserted, repeats
        ignored), and a replayed sample older than two metrics intervals decides nothing.
        """
        since = datetime.fromtimestamp(self.clock() - self.longest_window(), UTC)
        replayed = 0
        async for recorded in read_stream(self.js, METRICS, subject_filter="eru.metrics.*", since=since):
            node = recorded.subject.rpartition(".")[2]
            if not taken(node) or not self.owns(node):
                continue
            try:
                metrics = validate(recorded.body, NodeMetrics)
            except InvalidInput:
                continue  # it was refused (and logged) when it first arrived
            if metrics.node == node:
                await self.handle(metrics, recorded.envelope.id if recorded.envelope else None)
                replayed += 1
        self.load["rebuilt_samples"] = self.load.get("rebuilt_samples", 0.0) + replayed
        log.info("eviction.rebuilt", samples=replayed, since=since.isoformat())
        return replayed

    def forget(self, keep: Callable[[str], bool]) -> None:
        """Drop the trackers of nodes this replica no longer owns."""
        for node in [n for n in self.trackers if not keep(n)]:
            del self.trackers[node]

    def tracker(self, metrics: NodeMetrics) -> NodeTracker:
        """The node's tracker (created with the node's resolved configuration on its first sample)."""
        found = self.trackers.get(metrics.node)
        config = self.resolver.effective(metrics.node, metrics.pod)
        if found is not None and found.config != config:
            # A live watermark change: only percentages are live, so the window and horizon stay as they are; the
            # next condition carries the new watermarks at once.
            found.config = config
            found.last_condition = None
        if found is None:
            found = NodeTracker(
                metrics.node,
                config,
                replica=self.replica,
                condition_refresh_seconds=self.settings.condition_refresh_seconds,
                condition_floor_seconds=self.settings.condition_floor_seconds,
                eviction_retry_seconds=self.settings.eviction_retry_seconds,
            )
            self.trackers[metrics.node] = found
        return found

    async def on_message(self, msg: Any) -> None:
        """Core NATS callback for `eru.metrics.*`: skip other replicas' nodes, decode, handle; never raises.

        Each handled sample ends by yielding to the event loop (and every `SKIPS_PER_YIELD`-th skipped one): nats-py
        calls this callback in a loop that does not yield while samples are queued, so a backlog would otherwise hold
        the loop until it is worked off, and with it the lease renewals, the health answers and the replies that
        arrive behind the samples on the connection (the leases expired and the nodes moved, issue 41)."""
        node = msg.subject.rpartition(".")[2]
        if not self.owns(node):
            self.stats.skipped += 1
            if self.stats.skipped % SKIPS_PER_YIELD == 0:
                await asyncio.sleep(0)
            return
        await self._on_sample(msg, node)
        await asyncio.sleep(0)

    async def _on_sample(self, msg: Any, node: str) -> None:
        """Decode and handle one sample of a node this replica owns; bad input is counted and logged."""
        headers = msg.headers or {}
        try:
            metrics = decode(msg.data, NodeMetrics, media_type(headers.get(H_CONTENT_TYPE)))
            if metrics.node != node:
                raise InvalidInput("node", f"sample of {metrics.node!r} published on {msg.subject!r}")
        except InvalidInput as error:
            self.stats.rejected += 1
            self.load["rejected"] = float(self.stats.rejected)
            log.warning("eviction.sample.rejected", subject=msg.subject, field=error.field, reason=error.reason)
            return
        await self.handle(metrics, headers.get(H_ID))

    async def handle(self, metrics: NodeMetrics, cause: str | None = None) -> Outcome | None:
        """Feed one sample to its tracker and publish the outcome; bad input is logged, never raised."""
        self.stats.samples += 1
        try:
            history = self.budgets.history(metrics.pod) if self.budgets is not None else None
            self.pods[metrics.node] = metrics.pod
            outcome = self.tracker(metrics).observe(metrics, self.clock(), history)
        except InvalidInput as error:
            self.stats.rejected += 1
            if (metrics.node, error.field) not in self._broken:
                self._broken.add((metrics.node, error.field))
                log.warning("eviction.sample.invalid", node=metrics.node, field=error.field, reason=error.reason)
            return None
        if not outcome.accepted:
            self.stats.ignored += 1
            return outcome
        if outcome.commands or outcome.events or outcome.condition is not None:
            self._enqueue(metrics.node, outcome, cause)
        return outcome

    def _enqueue(self, node: str, outcome: Outcome, cause: str | None) -> None:
        """Publish in the background, in order per node, so waiting for PubAcks never holds up the next sample."""
        previous = self._publishing.get(node)

        async def run() -> None:
            if previous is not None:
                await asyncio.gather(previous, return_exceptions=True)
            await self.publish(node, outcome, cause)

        task = asyncio.create_task(run())
        self._publishing[node] = task

        def done(finished: asyncio.Task[None]) -> None:
            if self._publishing.get(node) is finished:
                del self._publishing[node]

        task.add_done_callback(done)

    async def drain(self) -> None:
        """Wait until everything decided so far is published."""
        while self._publishing:
            await asyncio.gather(*list(self._publishing.values()), return_exceptions=True)

    async def publish(self, node: str, outcome: Outcome, cause: str | None) -> None:
        """Budget claims, then commands (they are what the node is waiting for), then events, then the condition."""
        try:
            if self.budgets is not None:
                outcome = await claim_budgets(self.budgets, self.trackers.get(node), self.pods.get(node), outcome)
            await asyncio.gather(
                *(
                    publish(
                        self.js,
                        node_command(node, command.kind),
                        command,
                        new_envelope(
                            f"eru.node.{command.kind}",
                            self.source,
                            correlation_id=outcome.decision_id,
                            causation=cause,
                            message_id=command.command_id,
                        ),
                    )
                    for command in outcome.commands
                )
            )
            self.stats.commands += len(outcome.commands)
            for event in outcome.events:
                envelope = new_envelope(
                    f"eru.eviction.{event.kind}",
                    self.source,
                    correlation_id=outcome.decision_id,
                    causation=cause,
                    message_id=event.decision_id,
                )
                await publish(self.js, eviction(node), event, envelope)
                self.stats.events += 1
                count_decision(event)
                log.info(
                    "eviction.decision",
                    node=node,
                    kind=event.kind,
                    reason=event.reason,
                    victims=[v.container_id for v in event.victims],
                    batch_cpu_allowed=event.batch_cpu_allowed,
                )
            if outcome.condition is not None:
                condition = outcome.condition
                await publish(self.js, node_condition(node), condition, new_envelope("eru.node.condition", self.source))
                self.stats.conditions += 1
        except Exception as error:
            # The tracker already counts these commands as sent; forget it so nothing stays half-applied: the next
            # samples build a fresh window and decide again.
            self.stats.publish_failures += 1
            self.trackers.pop(node, None)
            log.error("eviction.publish_failed", node=node, error=str(error) or type(error).__name__)
