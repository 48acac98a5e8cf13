"""What the web console reads, on a real pipeline (NATS, PostgreSQL, allocator, distributor, scripted agent): the
allocator's `deploys` and `decision` queries, a decision explained node by node, and the console's backend replaying
it (docs/console.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pipeline_harness import pipeline_with_scripted_agent

from eru.bus.errors import RemoteError
from eru.console.backend import Backend
from eru.console.feed import Feed
from eru.decision_view import explain_deploy_decision
from eru.domain.messages import QueryRequest

pytestmark = pytest.mark.timeout(90)


def _bound(cores: int) -> dict[str, Any]:
    return {"name": f"w{cores}", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": cores}}


async def test_deploys_decision_and_why_not_per_node(nats_url: str, postgres_dsn: str) -> None:
    async with pipeline_with_scripted_agent(nats_url, postgres_dsn) as (pipe, _agent):
        first = await pipe.deploy(count=1, workload=_bound(3))
        assert (await pipe.terminal(first)).kind == "completed"
        (holder,) = {row["node"] for row in await pipe.containers(deploy_id=first)}
        second = await pipe.deploy(count=1, workload=_bound(2))
        assert (await pipe.terminal(second)).kind == "completed"
        (chosen,) = {row["node"] for row in await pipe.containers(deploy_id=second)}

        rows = (await pipe.op("query", QueryRequest(what="deploys", pod="p1", limit=10))).rows
        assert [row["id"] for row in rows] == [second, first]  # newest first
        assert rows[0]["states"] == {"running": 1}
        assert (rows[0]["workload"], rows[0]["count"], rows[0]["status"]) == ("w2", 1, "completed")
        decision_id = rows[0]["decision_id"]
        assert decision_id

        (decision,) = (await pipe.op("query", QueryRequest(what="decision", decision_id=decision_id))).rows
        assert decision["kind"] == "deploy"
        # recorded with the capacity of the node placed on only, read back with every node's (docs/replay.md)
        stored = json.loads(await pipe.pool.fetchval("SELECT output FROM decisions WHERE id = $1", decision_id))
        assert set(stored["capacity"]) == {chosen}
        assert decision["output"]["capacity"] == {
            holder: 0,
            chosen: 2,
            ({"n1", "n2", "n3"} - {holder, chosen}).pop(): 2,
        }
        assert "capacity_listed" not in decision["output"]
        explained = explain_deploy_decision(decision["input"], decision["output"])
        assert [{key: entry[key] for key in ("node", "instances", "capacity")} for entry in explained["placed"]] == [
            {"node": chosen, "instances": 1, "capacity": 2}
        ]
        why = {entry["node"]: entry for entry in explained["not_chosen"]}
        assert set(why) == {"n1", "n2", "n3"} - {chosen}
        # the node holding 3 of its 4 cores had 1 core free: too small, limited by cpu, with the numbers
        assert why[holder]["capacity"] == 0
        assert (why[holder]["reason"], why[holder]["why"]) == ("too_small", "too small: needs 2 cores, 1 free")
        assert why[holder]["numbers"]["limited_by"] == "cpu"
        (idle,) = set(why) - {holder}
        assert why[idle]["capacity"] == 2
        assert why[idle]["why"] == "room for 2 instances; mode auto placed them elsewhere"

        backend = Backend(pipe.nc, Feed())
        assert (await backend.replay(decision_id))["same"] is True
        page = await backend.deploy(second)
        assert page["decision"]["id"] == decision_id
        types = [event["type"] for event in page["events"]]
        assert "eru.deploy.planned" in types
        assert "eru.deploy.completed" in types


async def test_decision_query_names_the_field_when_wrong(nats_url: str, postgres_dsn: str) -> None:
    async with pipeline_with_scripted_agent(nats_url, postgres_dsn, nodes=("n1",)) as (pipe, _agent):
        with pytest.raises(RemoteError) as missing:
            await pipe.op("query", QueryRequest(what="decision"))
        assert missing.value.code == "invalid_input"
        assert "decision_id" in missing.value.message
        with pytest.raises(RemoteError) as unknown:
            await pipe.op("query", QueryRequest(what="decision", decision_id="nope"))
        assert "unknown decision 'nope'" in unknown.value.message
        # the allocator is still serving after bad input
        assert (await pipe.op("query", QueryRequest(what="deploys"))).rows == []
