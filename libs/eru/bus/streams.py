"""JetStream streams of eru and their idempotent provisioning (create, or update to the wanted configuration).

Every stream is capped by age and by size (docs/operations.md "Retention"): the oldest messages go first when either
limit is reached. ERU_NODE has interest retention — a node command is dropped once every consumer that wants it (the
node's durable consumer) has acknowledged it — so commands that were acted on do not stay for the retention period.
The other streams keep what was consumed (limits retention) for replay (`eru events`). Existing streams are updated in
place, idempotently, whenever a service or `eru up` starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import structlog
from nats.js import JetStreamContext, api
from nats.js.errors import BadRequestError, NotFoundError

from eru.errors import InvalidInput

if TYPE_CHECKING:
    from eru.settings import Settings

log = structlog.get_logger()

DEPLOY = "ERU_DEPLOY"
NODE = "ERU_NODE"
EVENTS = "ERU_EVENTS"
METRICS = "ERU_METRICS"
DLQ = "ERU_DLQ"
PARTITIONS = "ERU_PARTITIONS"

DAY = 24 * 3600
MiB = 1024**2
GiB = 1024**3
# Byte caps per stream (docs/operations.md "Retention" sizes them): a cap holds the heaviest load measured — the soak's
# 50 deploys/s — for hours; ordinary loads reach the age limit first. ERU_NODE only holds commands not yet acted on.
DEFAULT_STREAM_MAX_BYTES: Mapping[str, int] = {
    DEPLOY: 2 * GiB,
    NODE: 512 * MiB,
    EVENTS: 2 * GiB,
    METRICS: 512 * MiB,
    DLQ: 256 * MiB,
    PARTITIONS: 512 * MiB,
}
_RETENTION = {
    "limits": api.RetentionPolicy.LIMITS,
    "interest": api.RetentionPolicy.INTEREST,
    "workqueue": api.RetentionPolicy.WORK_QUEUE,
}
_NAME_IN_USE = 10058  # JetStream: stream name already in use (with a different configuration)
NODE_MAX_CONSUMERS = 100_000
"""ERU_NODE holds one durable consumer per node (docs/bus.md "Streams"). A stream that sets no `max_consumers` gets
nats-server's default of 1,000 (2.15.1 answers the 1,001st `maximum consumers limit reached`, err 10026): a 5,000-node
stack stopped at exactly 1,000 registered nodes."""


@dataclass(frozen=True)
class StreamSpec:
    """What one stream should look like."""

    name: str
    subjects: tuple[str, ...]
    max_age_seconds: float
    description: str
    duplicate_window_seconds: float = 120.0
    max_bytes: int = -1
    memory: bool = False
    replicas: int = 1
    retention: Literal["limits", "interest", "workqueue"] = "limits"
    max_consumers: int = -1
    """-1: the server's default (1,000 per stream)."""

    def config(self) -> api.StreamConfig:
        """The nats-py configuration of this stream."""
        if self.max_age_seconds <= 0:
            raise InvalidInput(f"streams.{self.name}.max_age_seconds", f"must be positive, got {self.max_age_seconds}")
        window = min(self.duplicate_window_seconds, self.max_age_seconds)
        return api.StreamConfig(
            name=self.name,
            description=self.description,
            subjects=list(self.subjects),
            retention=_RETENTION[self.retention],
            discard=api.DiscardPolicy.OLD,
            storage=api.StorageType.MEMORY if self.memory else api.StorageType.FILE,
            max_age=float(self.max_age_seconds),
            max_bytes=self.max_bytes,
            duplicate_window=float(window),
            num_replicas=self.replicas,
            max_consumers=self.max_consumers,
        )


def default_streams(
    *,
    events_max_age_seconds: float = 7 * DAY,
    metrics_max_age_seconds: float = 3600,
    dead_letter_max_age_seconds: float = 30 * DAY,
    duplicate_window_seconds: float = 120.0,
    max_bytes: Mapping[str, int] | None = None,
    replicas: int = 1,
    partitions: int = 16,
) -> tuple[StreamSpec, ...]:
    """The six streams of docs/bus.md with the given retentions and copies (`streams_for(settings)` derives
    them)."""
    window = duplicate_window_seconds
    caps = {**DEFAULT_STREAM_MAX_BYTES, **(max_bytes or {})}
    return (
        StreamSpec(
            DEPLOY,
            # tenant-scoped requests (`eru.t.<tenant>.deploy.request`, docs/security.md) are stored with the others
            ("eru.deploy.>", "eru.t.*.deploy.request"),
            events_max_age_seconds,
            "deploy requests and deploy progress",
            window,
            caps[DEPLOY],
            replicas=replicas,
        ),
        StreamSpec(
            NODE,
            ("eru.node.*.cmd.*", "eru.group.*.cmd.batch"),
            events_max_age_seconds,
            "commands to node agents",
            window,
            caps[NODE],
            replicas=replicas,
            retention="interest",
            max_consumers=NODE_MAX_CONSUMERS,
        ),
        StreamSpec(
            EVENTS,
            (
                "eru.container.*.*",
                "eru.group.*.results",
                "eru.eviction.*",
                "eru.node.*.condition",
                "eru.node.*.registered",
                "eru.watermarks.*.*",
            ),
            events_max_age_seconds,
            "container events, eviction decisions, node conditions, watermark overrides",
            window,
            caps[EVENTS],
            replicas=replicas,
        ),
        StreamSpec(
            METRICS,
            (
                "eru.metrics.*",
                "eru.node.*.heartbeat",
                "eru.node.*.inventory",
                "eru.heartbeats.*",
                "eru.inventories.*",
            ),
            metrics_max_age_seconds,
            "node and container usage samples, node heartbeats and inventories",
            window,
            caps[METRICS],
            replicas=replicas,
        ),
        StreamSpec(
            DLQ,
            ("eru.dlq.>",),
            dead_letter_max_age_seconds,
            "messages that could not be processed",
            window,
            caps[DLQ],
            replicas=replicas,
        ),
        StreamSpec(
            PARTITIONS,
            # deploy requests routed to the replica leasing their pod's partition (docs/replicas.md); a message
            # leaves once acknowledged, so what is left is exactly what no replica has finished. One subject per
            # partition (`allocator.partitions`), so nothing is ever stored where no consumer will read it.
            tuple(f"eru.partition.{n}.deploy" for n in range(partitions)),
            events_max_age_seconds,
            "deploy requests routed to their pod's partition",
            window,
            caps[PARTITIONS],
            retention="workqueue",
            replicas=replicas,
        ),
    )


def streams_for(settings: Settings) -> tuple[StreamSpec, ...]:
    """The streams as `settings` want them. Commands and events never outlive the record's retention
    (`retention_seconds`): a request still in ERU_DEPLOY always finds its deploy's outcome (docs/operations.md)."""
    return default_streams(
        events_max_age_seconds=min(settings.bus.events_max_age_seconds, settings.retention_seconds),
        metrics_max_age_seconds=settings.bus.metrics_max_age_seconds,
        dead_letter_max_age_seconds=max(settings.retention_seconds, min(30 * DAY, 4 * settings.retention_seconds)),
        max_bytes=settings.stream_max_bytes,
        replicas=settings.bus.stream_replicas,
        partitions=settings.allocator.partitions,
    )


def _differs(wanted: api.StreamConfig, current: api.StreamConfig) -> bool:
    fields = (
        "subjects",
        "max_age",
        "max_bytes",
        "duplicate_window",
        "description",
        "discard",
        "retention",
        "max_consumers",
    )
    return _replicas(wanted) > _replicas(current) or any(
        (sorted(getattr(wanted, f)) if f == "subjects" else getattr(wanted, f))
        != (sorted(getattr(current, f) or []) if f == "subjects" else getattr(current, f))
        for f in fields
    )


def _replicas(config: api.StreamConfig) -> int:
    return int(config.num_replicas or 1)


async def ensure_stream(js: JetStreamContext, spec: StreamSpec) -> Any:
    """Create the stream, or update it to `spec`; safe when several processes do it at the same time."""
    wanted = spec.config()
    for _ in range(3):
        try:
            info = await js.stream_info(spec.name)
        except NotFoundError:
            try:
                created = await js.add_stream(config=wanted)
            except BadRequestError as error:
                if error.err_code != _NAME_IN_USE:
                    raise
                continue  # another process created it first: read it and update if needed
            log.info(
                "bus.stream.created",
                stream=spec.name,
                subjects=list(spec.subjects),
                max_age=spec.max_age_seconds,
                max_bytes=spec.max_bytes,
                retention=spec.retention,
            )
            return created
        if not _differs(wanted, info.config):
            return info
        if info.config.storage != wanted.storage:
            log.warning("bus.stream.storage_kept", stream=spec.name, storage=str(info.config.storage))
            wanted = wanted.evolve(storage=info.config.storage)
        if _replicas(info.config) > _replicas(wanted):
            # copies are raised (R1 → R3 when a stack becomes a cluster), never lowered by a process that was
            # started without `bus.stream_replicas`: that would drop the cluster's protection silently
            wanted = wanted.evolve(num_replicas=_replicas(info.config))
        updated = await js.update_stream(config=wanted)
        log.info(
            "bus.stream.updated",
            stream=spec.name,
            subjects=list(spec.subjects),
            max_age=spec.max_age_seconds,
            max_bytes=spec.max_bytes,
            retention=spec.retention,
        )
        return updated
    return await js.stream_info(spec.name)


async def provision_streams(
    js: JetStreamContext,
    specs: tuple[StreamSpec, ...] | None = None,
    *,
    events_max_age_seconds: float = 7 * DAY,
    metrics_max_age_seconds: float = 3600,
) -> list[Any]:
    """Create or update every stream of eru (idempotent); returns their `StreamInfo`s. Services pass
    `streams_for(settings)`, so every process provisions the same configuration."""
    chosen = specs or default_streams(
        events_max_age_seconds=events_max_age_seconds, metrics_max_age_seconds=metrics_max_age_seconds
    )
    return list(await asyncio.gather(*(ensure_stream(js, spec) for spec in chosen)))
