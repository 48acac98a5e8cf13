"""Which failures of the store are transient (retried up to ERU_STORE_RETRY_SECONDS, docs/store.md "Outages")."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import asyncpg
import nats.errors
import nats.js.errors
import pytest

from eru.errors import InvalidInput
from eru.retry import cannot_reach_server, is_store_outage, is_transient
from eru.store.pool import StoreUnavailable, create_pool


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


def test_unreachable_is_judged_by_meaning_whatever_the_transport() -> None:
    # errno class: a peer that refused, vanished or timed out, over TCP or a Unix socket
    for code in (errno.ECONNREFUSED, errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT, errno.ENETDOWN, errno.ENOTCONN):
        assert cannot_reach_server(OSError(code, os.strerror(code))), errno.errorcode[code]
    assert cannot_reach_server(BrokenPipeError())
    assert cannot_reach_server(TimeoutError())
    assert cannot_reach_server(socket.gaierror(socket.EAI_NONAME, "Name or service not known"))
    # SQLSTATE class 08 (connection exception), 57P01-57P03 (shutdown, crash, starting), 53300 (too many)
    for error_class in (
        asyncpg.exceptions.ConnectionFailureError,
        asyncpg.exceptions.ClientCannotConnectError,
        asyncpg.exceptions.ConnectionRejectionError,
        asyncpg.ConnectionDoesNotExistError,
        asyncpg.exceptions.AdminShutdownError,
        asyncpg.exceptions.CrashShutdownError,
        asyncpg.CannotConnectNowError,
        asyncpg.exceptions.TooManyConnectionsError,
    ):
        error = error_class("gone")
        assert cannot_reach_server(error), error_class.__name__
        assert is_transient(error)
        assert is_store_outage(error)
    # what the pool's seam raises for any failure while connecting, e.g. the socket file gone (ENOENT)
    gone = StoreUnavailable("PostgreSQL unavailable at postgresql://@/eru?host=/run: no such file or directory")
    assert cannot_reach_server(gone)
    assert is_transient(gone)
    assert is_store_outage(gone)


def test_a_missing_file_of_our_own_or_a_bad_statement_is_not_an_outage() -> None:
    # ENOENT is only an outage where the pool connects (eru.store.pool); raised by our code it is a bug
    ours = FileNotFoundError(errno.ENOENT, "No such file or directory", "/etc/eru/missing.toml")
    assert not cannot_reach_server(ours)
    assert not is_transient(ours)
    assert not is_transient(PermissionError(errno.EACCES, "Permission denied"))
    assert not is_transient(asyncpg.exceptions.UniqueViolationError("duplicate key"))
    assert not is_transient(asyncpg.exceptions.UndefinedTableError("no such table"))
    # a conflict a rerun resolves is transient, yet it is not the server being unreachable
    assert is_transient(asyncpg.exceptions.DeadlockDetectedError("deadlock"))
    assert not cannot_reach_server(asyncpg.exceptions.SerializationError("could not serialize"))


async def test_the_pool_raises_store_unavailable_for_a_socket_that_is_not_there(tmp_path: Path) -> None:
    # connecting over a Unix socket whose file is gone (PostgreSQL stopped) fails with ENOENT: the pool's seam
    # says what it means, the server cannot be reached, not "a file is missing"
    with pytest.raises(StoreUnavailable) as unavailable:
        await create_pool(f"postgresql://postgres@/eru?host={tmp_path}&port=5999", min_size=1, connect_timeout=2)
    assert "no such file or directory" in unavailable.value.message
    assert is_transient(unavailable.value)
    assert is_store_outage(unavailable.value)
