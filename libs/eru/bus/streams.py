"""JetStream streams of eru and their idempotent provisioning (create, or update to the wanted configuration).

All streams use limits retention (messages stay until `max_age`), so commands and events remain for replay after
they are consumed; work-queue behaviour comes from the durable consumers, not from the stream.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog
from nats.js import api
from nats.js.errors import BadRequestError, NotFoundError

from eru.errors import InvalidInput

log = structlog.get_logger()

DEPLOY = "ERU_DEPLOY"
NODE = "ERU_NODE"
EVENTS = "ERU_EVENTS"
METRICS = "ERU_METRICS"
DLQ = "ERU_DLQ"

DAY = 24 * 3600
_NAME_IN_USE = 10058  # JetStream: stream name already in use (with a different configuration)


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

    def config(self) -> api.StreamConfig:
        """The nats-py configuration of this stream."""
        if self.max_age_seconds <= 0:
            raise InvalidInput(f"streams.{self.name}.max_age_seconds", f"must be positive, got {self.max_age_seconds}")
        window = min(self.duplicate_window_seconds, self.max_age_seconds)
        return api.StreamConfig(
            name=self.name,
            description=self.description,
            subjects=list(self.subjects),
            retention=api.RetentionPolicy.LIMITS,
            discard=api.DiscardPolicy.OLD,
            storage=api.StorageType.MEMORY if self.memory else api.StorageType.FILE,
            max_age=float(self.max_age_seconds),
            max_bytes=self.max_bytes,
            duplicate_window=float(window),
            num_replicas=self.replicas,
        )


def default_streams(
    *,
    events_max_age_seconds: float = 7 * DAY,
    metrics_max_age_seconds: float = 3600,
    dead_letter_max_age_seconds: float = 30 * DAY,
    duplicate_window_seconds: float = 120.0,
) -> tuple[StreamSpec, ...]:
    """The five streams of docs/bus.md with the given retentions (`BusSettings` carries the first two)."""
    window = duplicate_window_seconds
    return (
        StreamSpec(
            DEPLOY,
            # tenant-scoped requests (`eru.t.<tenant>.deploy.request`, docs/security.md) are stored with the others
            ("eru.deploy.>", "eru.t.*.deploy.request"),
            events_max_age_seconds,
            "deploy requests and deploy progress",
            window,
        ),
        StreamSpec(NODE, ("eru.node.*.cmd.*",), events_max_age_seconds, "commands to node agents", window),
        StreamSpec(
            EVENTS,
            ("eru.container.*.*", "eru.eviction.*", "eru.node.*.condition", "eru.node.*.registered"),
            events_max_age_seconds,
            "container events, eviction decisions, node conditions",
            window,
        ),
        StreamSpec(
            METRICS,
            ("eru.metrics.*", "eru.node.*.heartbeat", "eru.node.*.inventory"),
            metrics_max_age_seconds,
            "node and container usage samples, node heartbeats and inventories",
            window,
        ),
        StreamSpec(DLQ, ("eru.dlq.>",), dead_letter_max_age_seconds, "messages that could not be processed", window),
    )


def _differs(wanted: api.StreamConfig, current: api.StreamConfig) -> bool:
    fields = ("subjects", "max_age", "max_bytes", "duplicate_window", "description", "discard", "retention")
    return any(
        (sorted(getattr(wanted, f)) if f == "subjects" else getattr(wanted, f))
        != (sorted(getattr(current, f) or []) if f == "subjects" else getattr(current, f))
        for f in fields
    )


async def ensure_stream(js: Any, spec: StreamSpec) -> Any:
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
            log.info("bus.stream.created", stream=spec.name, subjects=list(spec.subjects), max_age=spec.max_age_seconds)
            return created
        if not _differs(wanted, info.config):
            return info
        if info.config.storage != wanted.storage:
            log.warning("bus.stream.storage_kept", stream=spec.name, storage=str(info.config.storage))
            wanted = wanted.evolve(storage=info.config.storage)
        updated = await js.update_stream(config=wanted)
        log.info("bus.stream.updated", stream=spec.name, subjects=list(spec.subjects), max_age=spec.max_age_seconds)
        return updated
    return await js.stream_info(spec.name)


async def provision_streams(
    js: Any,
    specs: tuple[StreamSpec, ...] | None = None,
    *,
    events_max_age_seconds: float = 7 * DAY,
    metrics_max_age_seconds: float = 3600,
) -> list[Any]:
    """Create or update every stream of eru (idempotent); returns their `StreamInfo`s."""
    chosen = specs or default_streams(
        events_max_age_seconds=events_max_age_seconds, metrics_max_age_seconds=metrics_max_age_seconds
    )
    return list(await asyncio.gather(*(ensure_stream(js, spec) for spec in chosen)))
