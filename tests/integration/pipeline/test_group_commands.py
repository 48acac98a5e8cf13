"""A deploy across many nodes of one command group arrives as ONE message (docs/node-agent.md "One message per
group"), over a real nats-server and PostgreSQL: the allocator learns the group from the process's group heartbeats,
sends the transaction's creates on `eru.group.<group>.cmd.batch` and nothing on the nodes' own command subjects, and
the real node agent (sim runtime, a command group of eight nodes) starts every container, each on its own node, and
answers with ONE `GroupEvents` on `eru.group.<group>.results`: the deploy completes with every container running.
Results a process sends for a node outside its group, or on another group's subject, are dead-lettered naming the
field, and change nothing."""

from __future__ import annotations

import time
from typing import Any

import pytest
from pipeline_harness import Pipeline, recorded, sim_group

from eru.bus import new_envelope
from eru.bus.codec import encode_value
from eru.domain.messages import GroupCommands, GroupEvents
from eru_allocator.nodes.groups import COMMAND_GROUPS

pytestmark = [pytest.mark.timeout(120)]

NODES = [f"grp-{i:03d}" for i in range(1, 9)]


def forged(node: str, row: Any) -> dict[str, Any]:
    return {"node": node, "container_id": row["id"], "deploy_id": row["deploy_id"], "kind": "removed"}


async def dead_letters(js: Any, count: int) -> dict[str, str]:
    """The reasons of the first `count` group results dead-lettered, by their subject (waits for them)."""
    sub = await js.subscribe("eru.dlq.eru.group.*.results", ordered_consumer=True)
    reasons = {}
    for _ in range(count):
        msg = await sub.next_msg(timeout=30)
        reasons[msg.subject.removeprefix("eru.dlq.")] = msg.headers["Eru-Dlq-Reason"]
    await sub.unsubscribe()
    return reasons


async def test_a_deploy_over_the_nodes_of_a_group_is_one_message_and_every_container_starts(
    nats_url: str, postgres_dsn: str
) -> None:
    COMMAND_GROUPS.forget()
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start()
    group_messages = await recorded(pipe.nc, "eru.group.*.cmd.batch", GroupCommands)
    node_subjects = await recorded(pipe.nc, "eru.node.*.cmd.*")
    results = await recorded(pipe.nc, "eru.group.*.results", GroupEvents)
    node_results = await recorded(pipe.nc, "eru.container.*.*")
    try:
        async with sim_group(nats_url, len(NODES), cpu_cores=1) as agents:  # one container of one core a node
            await pipe.wait_for(lambda: pipe.pool.fetchval("SELECT count(*) FROM nodes"), len(NODES))

            async def heard() -> int:
                return sum(COMMAND_GROUPS.group_of(node, time.monotonic()) == "grp" for node in NODES)

            await pipe.wait_for(heard, len(NODES))  # the allocator took a group heartbeat naming every node
            workload = {"name": "web", "image": "busybox", "resources": {"cpu_bind": True, "cpu_request": 1}}
            deploy_id = await pipe.deploy(count=len(NODES), workload=workload)
            done = await pipe.terminal(deploy_id)
            assert done.kind == "completed"
            assert len(done.started) == len(NODES)
            rows = await pipe.containers(deploy_id=deploy_id)
            assert {r["state"] for r in rows} == {"running"}
            assert sorted(r["node"] for r in rows) == NODES  # one container on each node
            # one message for the whole deploy, nothing on the nodes' own subjects
            assert len(group_messages) == 1
            assert node_subjects == []
            assert sorted(c.container_id for c in group_messages[0].commands) == sorted(r["id"] for r in rows)
            assert {a.node: list(a.state.containers) for a in agents} == {r["node"]: [r["id"]] for r in rows}
            # one answer for the whole batch, nothing on the nodes' own result subjects
            assert [(m.group, sorted(e.container_id for e in m.events)) for m in results] == [
                ("grp", sorted(r["id"] for r in rows))
            ]
            assert node_results == []

            # forged results: a node of another group, and the right node on another group's subject
            victim = rows[0]
            outside = [forged("grp-001", victim), forged("x-1", victim)]
            forgeries = {
                "eru.group.grp.results": {"group": "grp", "events": outside},
                "eru.group.other.results": {"group": "grp", "events": [forged(victim["node"], victim)]},
            }
            for index, (subject, body) in enumerate(forgeries.items()):
                envelope = new_envelope("eru.group.results", "hostile", message_id=f"forged-{index}")
                await pipe.js.publish(subject, encode_value(body), headers=envelope.to_headers())
            reasons = await dead_letters(pipe.js, len(forgeries))
            assert "events[1].node" in reasons["eru.group.grp.results"], reasons
            assert "'x-1' is not of group 'grp'" in reasons["eru.group.grp.results"], reasons
            assert "on the subject 'eru.group.other.results'" in reasons["eru.group.other.results"], reasons
            assert {r["state"] for r in await pipe.containers(deploy_id=deploy_id)} == {"running"}
    finally:
        await pipe.close()
        COMMAND_GROUPS.forget()
