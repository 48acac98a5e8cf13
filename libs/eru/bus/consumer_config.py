"""How a durable pull consumer is configured and created (`ConsumerOptions`, `consumer_config`, `ensure_consumer`),
and the small records the runner in `eru.bus.consumer` keeps (`ConsumerStats`, `Failure`); docs/bus.md."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nats.js import JetStreamContext, api
from nats.js.errors import NotFoundError


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
    store_retry_seconds: float = 120.0
    heal_check_seconds: float = 2.0
    # On a work-queue stream (ERU_PARTITIONS) a consumer must deliver all: what is left there is what nobody acked,
    # so a re-created consumer starts at the beginning instead of after the ack floor.
    work_queue: bool = False

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
    recreated: int = 0


@dataclass(frozen=True)
class Failure:
    """Why a message is dead-lettered: the reason (stored with it), the reply's code, the field if one is to blame."""

    reason: str
    code: str
    field: str | None = None
    message: str | None = None  # for the reply; the reason when None


SubjectFilter = str | Sequence[str]


def consumer_config(
    durable: str, subject_filter: SubjectFilter, options: ConsumerOptions, start_sequence: int | None = None
) -> api.ConsumerConfig:
    """The durable pull consumer's configuration; `start_sequence` makes it start there (a re-created consumer).

    `subject_filter` is one subject or several (JetStream's `filter_subjects`, e.g. the commands of every node a sim
    process serves: eru.bus.node_groups); one subject in a sequence is set as the single filter."""
    policy = api.DeliverPolicy.NEW if options.deliver_new_only else api.DeliverPolicy.ALL
    filters = [subject_filter] if isinstance(subject_filter, str) else list(subject_filter)
    return api.ConsumerConfig(
        name=durable,
        durable_name=durable,
        filter_subject=filters[0] if len(filters) == 1 else None,
        filter_subjects=filters if len(filters) > 1 else None,
        ack_policy=api.AckPolicy.EXPLICIT,
        ack_wait=options.ack_wait_seconds,
        # The runner counts deliveries itself and dead-letters; the server must never drop a message silently.
        max_deliver=-1,
        max_ack_pending=options.max_ack_pending,
        deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE if start_sequence else policy,
        opt_start_seq=start_sequence or None,
    )


async def ensure_consumer(
    js: JetStreamContext,
    stream: str,
    durable: str,
    subject_filter: SubjectFilter,
    options: ConsumerOptions = ConsumerOptions(),
    *,
    start_sequence: int | None = None,
) -> Any:
    """Create (or update) the durable pull consumer; every replica calling this shares one consumer.

    An existing consumer keeps its deliver policy (JetStream cannot change it), so a re-created one stays valid.
    """
    config = consumer_config(durable, subject_filter, options, start_sequence)
    with contextlib.suppress(NotFoundError):
        existing = await js.consumer_info(stream, durable)
        if _same(existing.config, config):
            # nothing to change: binding needs no create, which JetStream's meta leader must answer — and after a
            # server died that leader may be electing for seconds (docs/deploy.md "Where the seconds go")
            return existing
        config.deliver_policy = existing.config.deliver_policy
        config.opt_start_seq = existing.config.opt_start_seq
        config.opt_start_time = existing.config.opt_start_time
    return await js.add_consumer(stream, config=config)


_COMPARED = ("filter_subject", "filter_subjects", "ack_policy", "ack_wait", "max_deliver", "max_ack_pending")


def _same(existing: api.ConsumerConfig, wanted: api.ConsumerConfig) -> bool:
    """True when the existing consumer already has every setting this runner sets (its start is its own)."""
    return all(getattr(existing, name) == getattr(wanted, name) for name in _COMPARED)
