"""Partitioning deploy work by pod (docs/replicas.md): the stable hash, the fair share, and what a routed copy of a
request carries (its envelope, reply address and the subject its client used — never a client's forged origin)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from types import SimpleNamespace

from eru.bus.balance import WorkReport
from eru.bus.codec import encode, encode_value
from eru.bus.delivery import Delivery
from eru.bus.envelope import H_ID, H_MSG_ID, Envelope
from eru.bus.leases import fair_share, partition_of
from eru.bus.replies import H_REPLY_TO
from eru.bus.subjects import DEPLOY_REQUEST, H_ORIGIN_SUBJECT, origin_subject, partition_deploy
from eru.testing.deliveries import delivery as fake_delivery
from eru_allocator.intake.routing import Partitions, routed_headers


def test_partition_of_is_stable_across_processes() -> None:
    here = [partition_of(f"pod{i}", 16) for i in range(50)]
    code = "from eru.bus.leases import partition_of; print([partition_of(f'pod{i}', 16) for i in range(50)])"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert str(here) == there.strip()  # not Python's salted hash()
    assert partition_of("default", 16) == 15
    assert len(set(here)) > 8  # pods spread over the partitions


def test_fair_share() -> None:
    assert fair_share(16, 1) == 16
    assert fair_share(16, 3) == 6
    assert fair_share(8, 3) == 3
    assert fair_share(4, 8) == 1
    assert fair_share(16, 0) == 16


def _delivery(subject: str, headers: dict[str, str]) -> Delivery:
    return fake_delivery(
        subject, stream="ERU_DEPLOY", consumer="allocator-tenant-deploy", stream_sequence=42, headers=headers
    )


def test_a_routed_copy_keeps_the_envelope_the_reply_and_the_true_origin() -> None:
    envelope = Envelope("ce-1", "eru.deploy.request", "client", datetime.now(UTC), "ce-1")
    client_headers = {
        **envelope.to_headers(),
        H_REPLY_TO: "_INBOX.client.7",
        "Content-Type": "application/msgpack",
        "Nats-Expected-Stream": "ERU_DEPLOY",
        H_ORIGIN_SUBJECT: "eru.deploy.request",  # forged by a tenant's client: must not widen its scope
    }
    headers = routed_headers(_delivery("eru.t.acme.deploy.request", client_headers), envelope)
    assert headers[H_ID] == "ce-1"  # same envelope → same request key → at most once
    assert headers[H_REPLY_TO] == "_INBOX.client.7"  # the owner answers the client itself
    assert headers[H_ORIGIN_SUBJECT] == "eru.t.acme.deploy.request"
    assert headers[H_MSG_ID] == "route:ERU_DEPLOY:42"  # a redelivered intake message is stored once
    assert "Nats-Expected-Stream" not in headers
    assert origin_subject(partition_deploy(3), headers) == "eru.t.acme.deploy.request"


def test_a_plain_clients_message_keeps_its_stand_in_envelope() -> None:
    stand_in = Envelope("ERU_DEPLOY:42", DEPLOY_REQUEST, "external", datetime.now(UTC), "ERU_DEPLOY:42")
    headers = routed_headers(_delivery(DEPLOY_REQUEST, {}), stand_in)
    assert headers[H_ID] == "ERU_DEPLOY:42"
    assert headers[H_ORIGIN_SUBJECT] == DEPLOY_REQUEST


def test_origin_subject_trusts_the_header_only_on_partition_subjects() -> None:
    forged = {H_ORIGIN_SUBJECT: "eru.deploy.request"}
    assert origin_subject("eru.t.acme.deploy.request", forged) == "eru.t.acme.deploy.request"
    assert origin_subject(partition_deploy(0), {}) == DEPLOY_REQUEST
    assert partition_deploy(5) == "eru.partition.5.deploy"


def test_only_existing_partitions_are_stored() -> None:
    """A message on a partition no replica can lease (`eru.partition.<n>.deploy`, `.99.`) is refused by the bus
    instead of waiting unread for ever in the work queue."""
    from eru.bus.streams import PARTITIONS, default_streams

    spec = next(s for s in default_streams(partitions=4) if s.name == PARTITIONS)
    assert spec.subjects == tuple(f"eru.partition.{n}.deploy" for n in range(4))


async def test_a_partition_consumer_that_cannot_be_created_during_an_election_is_retried() -> None:
    # compose failover test: the survivor took the partition while JetStream elected a new leader; creating the
    # consumer raised 503 inside an unobserved task and the partition stayed unread (docs/deploy.md)
    import asyncio
    from typing import Any

    import nats.js.errors

    from eru_allocator.intake.routing import Partitions

    class Js:
        deletes = 0

        async def delete_consumer(self, stream: str, durable: str) -> None:
            self.deletes += 1
            if self.deletes == 1:
                raise nats.js.errors.ServiceUnavailableError(code=503, description="JetStream temporarily unavailable")
            raise nats.js.errors.NotFoundError(code=404)

    runs: list[int] = []
    consuming = asyncio.Event()

    class Consumer:
        async def run(self) -> None:
            runs.append(1)
            if len(runs) == 1:
                raise nats.js.errors.ServiceUnavailableError(code=503, description="JetStream temporarily unavailable")
            consuming.set()
            await stop_seen.wait()

    stop_seen = asyncio.Event()

    def make_consumer(partition: int, stop: asyncio.Event) -> Any:
        async def watch() -> None:
            await stop.wait()
            stop_seen.set()

        asyncio.get_running_loop().create_task(watch())
        return Consumer()

    partitions = Partitions(Js(), "allocator-1", 16, 3.0, make_consumer)
    await partitions._take(15)
    await asyncio.wait_for(consuming.wait(), timeout=10)
    assert len(runs) == 2  # the first delete failed, then the first run: retried until the consumer runs
    await partitions._finish({15})
    assert partitions.tasks() == []


async def test_a_bad_work_report_is_ignored_and_a_good_one_heard() -> None:
    partitions = Partitions(None, "alloc-b", 16, 5.0, lambda _p, _s: None)  # type: ignore[arg-type,return-value]
    for data in (b"\xc1", encode_value({"replica": "alloc-a", "owned": "many"}), encode_value([1, 2])):
        await partitions._on_report(SimpleNamespace(data=data, header=None))  # type: ignore[arg-type]
    assert partitions.ledger.heard_at == {}
    assert not partitions._wake.is_set()
    sent = WorkReport(replica="alloc-a", owned=(1, 2), busy=(1, 2), handed={0: "alloc-b"})
    await partitions._on_report(SimpleNamespace(data=encode(sent), header=None))  # type: ignore[arg-type]
    assert set(partitions.ledger.heard_at) == {"alloc-a"}
    assert partitions._adopt == {0}  # handed to this replica: adopted at once
    assert partitions._wake.is_set()
