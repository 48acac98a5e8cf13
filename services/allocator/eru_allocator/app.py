"""The allocator service: deploy requests, container events, node registrations, operations, the outbox relay.

`Allocator` runs every part of one replica over a NATS connection and a PostgreSQL pool; any number of replicas
share the durable consumers (each message reaches one replica) and the operation queue group. `service_main` is
what `eru.service.run` starts; tests start `Allocator` directly.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import asyncpg
import structlog
from nats.aio.client import Client
from pydantic import BaseModel

from eru.bus import Consumer, ConsumerOptions, Delivery, Envelope, Server
from eru.bus.consumer import Handler
from eru.bus.leases import health_probe
from eru.bus.protocol import NatsBus
from eru.bus.streams import DEPLOY, EVENTS, METRICS, PARTITIONS, provision_streams, streams_for
from eru.bus.subjects import (
    DEPLOY_REQUEST,
    GROUP_HEARTBEATS,
    GROUP_INVENTORIES,
    GROUP_RESULTS,
    NODE_HEARTBEATS,
    NODE_INVENTORIES,
    NODE_REGISTRATIONS,
    TENANT_DEPLOY_REQUESTS,
    partition_deploy,
)
from eru.colocation.backoff import parse_keep_config
from eru.domain import (
    Accepted,
    ContainerEvent,
    ContainerEvents,
    ContainerReport,
    DeployRequest,
    GroupEvents,
    Heartbeat,
    NodeHeartbeats,
    NodeRegistration,
)
from eru.domain.colocation import NodeCondition
from eru.domain.inventory import NodeInventories, NodeInventory
from eru.errors import EruError, InvalidInput
from eru.nodeagent.reporters import check_group_events, check_node_events
from eru.planning import PlanningConfig
from eru.reconcile import ReconcilePolicy
from eru.service import ServiceContext
from eru.settings import Settings
from eru_allocator.containers.events import EventContext, Report, apply_events
from eru_allocator.containers.keep_count import Keeper
from eru_allocator.containers.sweeper import sweep
from eru_allocator.delivery.dead_letter_gate import DeadLetterGate
from eru_allocator.delivery.dead_letter_recorder import dead_letter_recorder
from eru_allocator.delivery.outbox import run_relay
from eru_allocator.delivery.publisher import CommittedPublisher
from eru_allocator.delivery.settled import DeployConsumer
from eru_allocator.deploy.admission_pass import run_admission
from eru_allocator.deploy.context import Context, Item
from eru_allocator.deploy.pipeline import commit_batch
from eru_allocator.flow.batcher import Batcher
from eru_allocator.flow.in_progress import InProgress
from eru_allocator.health.reports import record_health, split_health
from eru_allocator.intake.handlers import DeployIntake
from eru_allocator.intake.routing import IntakeConsumer, LeadPaced, Partitions, partition_consumer
from eru_allocator.nodes.reports import REGISTRATION_BATCH, NodeReports
from eru_allocator.operations import containers
from eru_allocator.operations.responders import Operations, serve_operations
from eru_allocator.store.container_store import PgContainerEvents
from eru_allocator.store.delivery_store import PgDelivery
from eru_allocator.store.kept_store import PgKeptInstances
from eru_allocator.store.node_store import PgNodes
from eru_allocator.store.operation_store import PgOperations
from eru_allocator.store.postgres import PgStore
from eru_allocator.store.query_store import PgQueries
from eru_allocator.store.tenants import PgTenants
from eru_allocator.store.waiting import PgAdmissionQueue
from eru_allocator.store.watermark_store import PgWatermarks

log = structlog.get_logger()

DEPLOY_CONSUMER = "allocator-deploy"
TENANT_DEPLOY_CONSUMER = "allocator-tenant-deploy"  # eru.t.*.deploy.request: the tenant from the subject
EVENTS_CONSUMER = "allocator-container-events"
CONTAINER_EVENTS = "eru.container.*.*"
CONDITIONS_CONSUMER = "allocator-node-conditions"
NODE_CONDITIONS = "eru.node.*.condition"
REGISTRATIONS_CONSUMER = "allocator-registrations"
HEARTBEATS_CONSUMER = "allocator-heartbeats"
GROUP_HEARTBEATS_CONSUMER = "allocator-group-heartbeats"
GROUP_RESULTS_CONSUMER = "allocator-group-results"
GROUP_INVENTORIES_CONSUMER = "allocator-group-inventories"
INVENTORIES_CONSUMER = "allocator-inventories"
# heartbeats (one per node every 5 s) and conditions in flight at once: what arrives together is one statement
NODE_REPORT_CONCURRENCY = 256


@dataclasses.dataclass(frozen=True)
class Route:
    """One durable consumer of a replica: what it reads, how many messages at once, and who handles them. An intake
    route's requests are planned here or routed by pod (`intake.routing.IntakeConsumer`); the others are node
    reports the lead replica reads at full batches (`intake.routing.LeadPaced`)."""

    stream: str
    durable: str
    subject: str
    model: type[BaseModel]
    handler: Handler[Any]
    options: ConsumerOptions
    intake: bool = False


class Allocator:
    """One allocator replica: the objects that handle each consumer's messages, and the loops it runs."""

    def __init__(self, pool: asyncpg.Pool, nc: Client, settings: Settings) -> None:
        self.pool = pool
        self.nc = nc
        self.js = nc.jetstream()
        self.settings = settings
        self.source = f"allocator/{settings.replica}"
        planning = settings.planning
        self.config = PlanningConfig(planning.share_base, planning.max_fragment_cores, planning.max_deploy_count)
        own = settings.allocator
        self.keep = parse_keep_config(own.keep, "allocator.keep")  # exits 2 naming the field when wrong
        self.store = PgStore(pool)
        self.bus = NatsBus(nc)
        hold = own.outbox_hold_seconds
        self.delivery = PgDelivery(pool)
        self.publisher = CommittedPublisher(self.delivery, self.js, self.bus, hold_seconds=hold) if hold > 0 else None
        self.deploy_ctx = Context(
            self.store,
            self.bus,
            self.config,
            self.source,
            own.place_timeout_seconds,
            own.node_down_after_seconds,
            self.keep,
            own.plan_ahead,
            dead_letters=DeadLetterGate(self.bus),
            publisher=self.publisher,
        )
        deploy_batcher: Batcher[Item, Accepted | EruError] = Batcher(
            lambda pod, items: commit_batch(self.deploy_ctx, pod, items),
            max_batch=own.deploy_batch,
            weight=lambda item: max(1, item[0].count),
            max_weight=own.deploy_batch_containers,
            pipelined=own.plan_ahead,
        )
        self.event_ctx = EventContext(self.source, PgContainerEvents(pool), PgNodes(pool), self.bus, self.publisher)
        self.event_batcher: Batcher[Report, None] = Batcher(
            lambda _key, items: apply_events(self.event_ctx, items), max_batch=own.event_batch, pipelined=True
        )
        self.ops_ctx = containers.OpsContext(
            self.source, PgOperations(pool), PgQueries(pool), self.delivery, PgWatermarks(pool)
        )
        rules = settings.reconcile
        self.reconcile_policy = ReconcilePolicy(rules.grace_seconds, rules.unknown, rules.drift)
        self.node_reports = NodeReports(self.event_ctx.nodes, self.event_ctx, self.reconcile_policy, rules.enabled)
        self.stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._servers: list[Server] = []
        self.deploy_max_deliver = ConsumerOptions().max_deliver
        self.consumers: list[Consumer[Any]] = []
        self.partitions = Partitions(
            self.js,
            settings.replica,
            own.partitions,
            own.lease_ttl_seconds,
            self._partition_consumer,
            copies=settings.bus.stream_replicas,
            probe=health_probe(nc, "allocator"),
            nc=nc,
        )
        in_progress = InProgress(min(own.ack_wait_seconds, own.deploy_ack_wait_seconds) / 3)
        self.intake = DeployIntake(
            self.delivery, nc, self.source, self.partitions, self.deploy_ctx, deploy_batcher, in_progress
        )
        self._deploy_options = ConsumerOptions()

    def routes(self) -> list[Route]:
        """The replica's consumers, one row each (the dead-letter recorder and the partitions' consumers apart)."""
        own = self.settings.allocator
        retry = self.settings.store_retry_seconds
        deploy_options = ConsumerOptions(
            concurrency=own.deploy_concurrency,
            batch=min(own.deploy_concurrency, 64),
            # short, with in-progress every third while planning: a killed replica's requests come back soon
            ack_wait_seconds=min(own.ack_wait_seconds, own.deploy_ack_wait_seconds),
            store_retry_seconds=retry,
        )
        ack_wait = own.ack_wait_seconds
        event_batch = min(own.event_concurrency, 256)
        reports = NODE_REPORT_CONCURRENCY
        registrations = REGISTRATION_BATCH
        nodes = self.node_reports
        # fmt: off
        return [
            Route(DEPLOY, DEPLOY_CONSUMER, DEPLOY_REQUEST, DeployRequest, self.intake.on_deploy, deploy_options,
                  intake=True),
            Route(DEPLOY, TENANT_DEPLOY_CONSUMER, TENANT_DEPLOY_REQUESTS, DeployRequest, self.intake.on_tenant_deploy,
                  deploy_options, intake=True),
            Route(EVENTS, EVENTS_CONSUMER, CONTAINER_EVENTS, ContainerReport, self._on_event, ConsumerOptions(
                concurrency=own.event_concurrency, batch=event_batch, ack_wait_seconds=ack_wait,
                max_ack_pending=20_000, store_retry_seconds=retry)),
            Route(EVENTS, GROUP_RESULTS_CONSUMER, GROUP_RESULTS, GroupEvents, self._on_group_results,
                  ConsumerOptions(concurrency=own.event_concurrency, batch=event_batch, ack_wait_seconds=ack_wait,
                                  max_ack_pending=20_000, store_retry_seconds=retry)),
            Route(EVENTS, REGISTRATIONS_CONSUMER, NODE_REGISTRATIONS, NodeRegistration, nodes.on_register,
                  ConsumerOptions(batch=registrations, concurrency=registrations, ack_wait_seconds=ack_wait,
                                  store_retry_seconds=retry)),
            Route(METRICS, HEARTBEATS_CONSUMER, NODE_HEARTBEATS, Heartbeat, nodes.on_heartbeat, ConsumerOptions(
                concurrency=reports, batch=reports, max_deliver=2, deliver_new_only=True, store_retry_seconds=retry)),
            Route(METRICS, GROUP_HEARTBEATS_CONSUMER, GROUP_HEARTBEATS, NodeHeartbeats, nodes.on_group_heartbeats,
                  ConsumerOptions(concurrency=8, batch=8, max_deliver=2, deliver_new_only=True,
                                  store_retry_seconds=retry)),
            Route(METRICS, INVENTORIES_CONSUMER, NODE_INVENTORIES, NodeInventory, nodes.on_inventory, ConsumerOptions(
                concurrency=64, batch=64, max_deliver=3, deliver_new_only=True, ack_wait_seconds=ack_wait,
                store_retry_seconds=retry)),
            Route(METRICS, GROUP_INVENTORIES_CONSUMER, GROUP_INVENTORIES, NodeInventories, nodes.on_group_inventories,
                  ConsumerOptions(concurrency=4, batch=4, max_deliver=3, deliver_new_only=True,
                                  ack_wait_seconds=ack_wait, store_retry_seconds=retry)),
            Route(EVENTS, CONDITIONS_CONSUMER, NODE_CONDITIONS, NodeCondition, nodes.on_condition, ConsumerOptions(
                concurrency=reports, batch=reports, ack_wait_seconds=ack_wait, store_retry_seconds=retry)),
        ]
        # fmt: on

    def _consumer(self, route: Route) -> Consumer[Any]:
        """The consumer of one route, paced by this replica's partitions."""
        if route.intake:
            return IntakeConsumer(
                self.js,
                route.stream,
                route.durable,
                route.subject,
                route.model,
                route.handler,
                options=route.options,
                stop=self.stopping,
                source=self.source,
                store=self.delivery,
                partitions=self.partitions,
            )
        return LeadPaced(
            self.js,
            route.stream,
            route.durable,
            route.subject,
            route.model,
            route.handler,
            options=route.options,
            stop=self.stopping,
            partitions=self.partitions,
        )

    async def start(self) -> None:
        """Provision streams (idempotent), start consumers, responders and the relay."""
        await provision_streams(self.js, streams_for(self.settings))
        own = self.settings.allocator
        self.consumers = [self._consumer(route) for route in self.routes()]
        self.consumers.append(dead_letter_recorder(self.js, self.delivery, self.stopping, self.source))
        deploys = self.consumers[0]  # the first route's: eru.deploy.request
        self.deploy_max_deliver = deploys.options.max_deliver
        self._deploy_options = dataclasses.replace(deploys.options, work_queue=True)
        await self.partitions.start()  # a share of the pods before the first request is fetched (docs/replicas.md)
        self._servers += await serve_operations(
            Operations(
                self.nc,
                self.config,
                self.source,
                self.settings,
                self.ops_ctx,
                self.event_ctx,
                self.reconcile_policy,
                self.node_reports.nodes,
                PgTenants(self.pool),
            )
        )
        self._tasks = [asyncio.create_task(c.run(), name=f"consumer-{c.durable}") for c in self.consumers]
        self._tasks.append(asyncio.create_task(self.partitions.run(self.stopping), name="partition-leases"))
        self._tasks.append(
            asyncio.create_task(
                run_admission(
                    self.deploy_ctx,
                    self.store,
                    PgAdmissionQueue(self.pool),
                    self.stopping,
                    owns=self.partitions.owns,
                ),
                name="admission",
            )
        )
        self._tasks.append(
            asyncio.create_task(
                sweep(
                    self.event_ctx,
                    self.settings,
                    self.stopping,
                    self.deploy_max_deliver,
                    self.delivery,
                    self.partitions.leads,
                ),
                name="overdue-sweep",
            )
        )
        keeper = Keeper(PgKeptInstances(self.pool), self.source, self.keep, wait_seconds=own.keep_wait_seconds)
        keeping = keeper.run(self.stopping, own.keep_interval_seconds, self.partitions.leads)
        self._tasks.append(asyncio.create_task(keeping, name="keeper"))
        self._tasks.append(
            asyncio.create_task(
                run_relay(
                    self.delivery,
                    self.js,
                    self.stopping,
                    batch=own.relay_batch,
                    nc=self.nc,
                    eager=self.partitions.leads,
                    woken=self.partitions.on_gain(),
                ),
                name="outbox-relay",
            )
        )
        if self.publisher is not None:
            self._tasks.append(asyncio.create_task(self.publisher.run(self.stopping), name="outbox-marks"))
        log.info("allocator.started", replica=self.settings.replica)

    async def stop(self) -> None:
        """Stop taking work, finish what is in flight, relay what was committed."""
        self.stopping.set()
        for server in self._servers:
            await server.stop()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.publisher is not None:  # what the last batches published after the marks task ended
            await self.publisher.close()
        await self.store.wait_unlocked()  # the last deploy batches' pod locks, before the runner closes the pool

    async def wait(self) -> None:
        """Until a consumer or the relay ends (a lost connection), re-raising its failure."""
        done, _ = await asyncio.wait(self._tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()

    def _partition_consumer(self, partition: int, stop: asyncio.Event) -> Consumer[Any]:
        """The consumer of one leased partition's routed requests (`intake/routing.py`)."""
        return DeployConsumer(
            self.js,
            PARTITIONS,
            partition_consumer(partition),
            partition_deploy(partition),
            DeployRequest,
            self.intake.on_routed_deploy,
            options=self._deploy_options,
            stop=stop,
            source=self.source,
            store=self.delivery,
        )

    async def _on_event(self, report: ContainerReport, envelope: Envelope, delivery: Delivery) -> None:
        # an event names the node of its subject (`eru.container.<node>.<kind>`), the only one its agent may publish on
        events = report.events()
        check_node_events(delivery.subject.split(".")[2], events, batch=isinstance(report.root, ContainerEvents))
        await self._apply(events, envelope)

    async def _on_group_results(self, results: GroupEvents, envelope: Envelope, delivery: Delivery) -> None:
        # `eru.group.<group>.results`: the group of the subject, the only one its process may publish on
        if results.group != delivery.subject.split(".")[2]:
            raise InvalidInput("group", f"group {results.group!r} reported on the subject {delivery.subject!r}")
        check_group_events(results)
        await self._apply(results.events, envelope)

    async def _apply(self, reported: list[ContainerEvent], envelope: Envelope) -> None:
        # health reports go to the ledger on their own (eru_allocator.health.reports); a message's events are one
        # item: applied and marked in the inbox in one transaction, like a single event
        health, events = split_health(reported)
        if health:
            await record_health(self.event_ctx.store, health)
        if events:
            await self.event_batcher.submit("events", (events, envelope))


async def service_main(ctx: ServiceContext) -> None:
    """Run one replica until the runner asks to stop."""
    if ctx.pool is None:
        raise RuntimeError("the allocator needs the store: the service runner opens its pool (needs_store)")
    allocator = Allocator(ctx.pool, ctx.nc, ctx.settings)
    await allocator.start()
    ctx.ready.set()
    stop_wait = asyncio.create_task(ctx.stopping.wait())
    work = asyncio.create_task(allocator.wait())
    try:
        await asyncio.wait({stop_wait, work}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop_wait.cancel()
        await allocator.stop()
    if work.done() and not work.cancelled() and work.exception() is not None:
        raise work.exception()  # type: ignore[misc]
