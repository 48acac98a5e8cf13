"""`eru status` of a NATS cluster (docs/deploy.md "On one machine"): a server down while the others serve makes the
bus `degraded` (listed, still healthy); restarts of every server add up; each stream's placement in one line."""

from __future__ import annotations

from typing import Any

import pytest

from eru.cli.stack_commands import status_document
from eru.stack.cluster import check_cluster_size, describe_placement, stream_replicas
from eru.stack.info import StackError

READY = [
    {"service": service, "replica": f"{service}-1", "version": "0.1.0", "ready": True}
    for service in ("allocator", "distributor", "node-agent", "eviction")
]
POSTGRES = {"state": "up", "dsn": "postgresql://x", "version": "18", "detail": ""}


def nats(state: str) -> dict[str, Any]:
    servers = [{"address": f"127.0.0.1:{4000 + i}", "name": f"nats-{i}", "state": "up"} for i in (1, 2, 3)]
    if state == "degraded":
        servers[1]["state"] = "down"
    return {"state": state, "url": "nats://a,nats://b,nats://c", "detail": "", "servers": servers, "streams": []}


def test_a_lost_server_degrades_the_bus_but_the_stack_stays_healthy() -> None:
    restarts = {"nats-1": 1, "nats-2": 2, "postgres": 0}
    doc = status_document(nats=nats("degraded"), postgres=POSTGRES, replicas=READY, restarts=restarts)
    assert doc["healthy"] is True
    assert doc["degraded"] == ["nats"]
    assert doc["nats"]["restarts"] == 3
    assert [s["state"] for s in doc["nats"]["servers"]] == ["up", "down", "up"]
    whole = status_document(nats=nats("up"), postgres=POSTGRES, replicas=READY, restarts=restarts)
    assert whole["degraded"] == []
    down = status_document(nats={**nats("up"), "state": "down"}, postgres=POSTGRES, replicas=READY)
    assert down["healthy"] is False


def test_each_stream_in_one_line() -> None:
    rows = [
        {
            "stream": "ERU_DEPLOY",
            "replicas": 3,
            "leader": "nats-2",
            "followers": [
                {"name": "nats-1", "current": True, "offline": False, "lag": 0},
                {"name": "nats-3", "current": False, "offline": True, "lag": None},
            ],
        },
        {"stream": "ERU_NODE", "replicas": 1, "leader": None, "followers": []},
        {"stream": "ERU_DLQ", "error": "NotFoundError"},
    ]
    assert describe_placement(rows).splitlines() == [
        "ERU_DEPLOY R3 leader nats-2, followers nats-1 (current), nats-3 (offline)",
        "ERU_NODE R1 leader -",
        "ERU_DLQ: NotFoundError",
    ]


def test_cluster_sizes() -> None:
    assert [stream_replicas(size) for size in (1, 3, 4, 5)] == [1, 3, 3, 3]
    for size in (1, 3, 5):
        check_cluster_size(size)
    for size, reason in ((2, "majority"), (0, "use 1"), (6, "use 1")):
        with pytest.raises(StackError, match=reason):
            check_cluster_size(size)
