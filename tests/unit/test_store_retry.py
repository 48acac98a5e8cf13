"""Which failures of the store are transient (retried up to ERU_STORE_RETRY_SECONDS, docs/store.md "Outages")."""

from __future__ import annotations

import errno

import asyncpg
import nats.errors
import nats.js.errors

from eru.errors import InvalidInput
from eru.store.retry import is_store_outage, is_transient


def test_a_connection_left_busy_by_a_killed_postgres_is_transient() -> None:
    # what asyncpg raised in the fault suite when the postmaster was killed -9 mid-query: the container event that
    # met it was dead-lettered as a bug, so a container that did start was failed in the ledger
    busy = asyncpg.InternalClientError("cannot switch to state 15; another operation (2) is in progress")
    assert is_transient(busy)
    assert is_store_outage(busy)


def test_other_internal_client_errors_and_bugs_are_not_transient() -> None:
    assert not is_transient(asyncpg.InternalClientError("unexpected message type"))
    assert not is_transient(InvalidInput("count", "must be positive"))
    assert not is_transient(ValueError("boom"))


def test_refused_and_lost_connections_are_transient() -> None:
    assert is_transient(ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"))
    assert is_transient(asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"))
    assert is_transient(
        asyncpg.InterfaceError("cannot call Transaction.__aexit__(): the underlying connection is closed")
    )


def test_a_stream_electing_a_new_leader_is_transient_not_a_bug() -> None:
    # what a JetStream publish raises while the server that led the stream is gone (compose failover test)
    election = [
        nats.js.errors.NoStreamResponseError(),
        nats.errors.NoRespondersError(),
        nats.js.errors.ServiceUnavailableError(code=503, description="JetStream system temporarily unavailable"),
        nats.errors.ConnectionReconnectingError(),
        nats.errors.UnexpectedEOF(),
    ]
    for error in election:
        assert is_transient(error), type(error).__name__
        assert not is_store_outage(error)  # answered `unavailable`, not `store_unavailable`, if it lasts
    assert not is_transient(nats.js.errors.BadRequestError(code=400, description="bad request"))
