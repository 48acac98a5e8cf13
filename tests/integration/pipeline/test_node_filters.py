"""Node filters end to end (docs/placement-modes.md "Node filters"): operator labels set with `eru node set --label`
survive the agent registering again and show in `eru node ls`; `eru deploy --node-label … --exclude-nodes …` places
only on matching nodes, `eru explain` names the filter that left each other node out and the decision replays the
same; a filter matching nothing or naming an unknown node is refused in one line naming the option, exit 2, with
nothing recorded. Real allocator, distributor, nats-server, PostgreSQL and the node agent with its sim runtime."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline_harness import Pipeline, eru_cli, pipeline_with_sim_nodes

from eru.replay import RecordedDecision, replay
from eru.store.decisions import full_input

NODES = ("sim-001", "sim-002", "sim-003", "sim-004")


async def _cli(nats_url: str, tmp_path: Path, *args: str) -> tuple[int, str]:
    return await eru_cli(*args, "--nats", nats_url, "--state-dir", str(tmp_path))


async def _recorded(pipe: Pipeline) -> int:
    return int(await pipe.pool.fetchval("SELECT (SELECT count(*) FROM deploys) + (SELECT count(*) FROM decisions)"))


async def test_operator_labels_and_a_filtered_deploy(nats_url: str, postgres_dsn: str, tmp_path: Path) -> None:
    async with pipeline_with_sim_nodes(nats_url, postgres_dsn, count=4) as pipe:
        for node, label in (("sim-001", "disk=ssd"), ("sim-002", "disk=ssd"), ("sim-003", "disk=ssd")):
            code, out = await _cli(nats_url, tmp_path, "node", "set", node, "--label", label, "--label", "zone=a")
            assert code == 0, out
        code, out = await _cli(nats_url, tmp_path, "node", "set", "sim-004", "--label", "disk=hdd")
        assert code == 0, out
        # the agent of sim-001 registers again (as after a restart): its labels replace the agent's, not the operator's
        await pipe.register("sim-001", cores=4, labels={"engine": "sim", "rack": "r1"})
        code, out = await _cli(nats_url, tmp_path, "node", "ls", "-o", "json")
        assert code == 0, out
        rows = {row["name"]: row for row in json.loads(out)["nodes"]}
        assert rows["sim-001"]["operator_labels"] == {"disk": "ssd", "zone": "a"}
        assert rows["sim-001"]["effective_labels"] == {"engine": "sim", "rack": "r1", "disk": "ssd", "zone": "a"}
        assert rows["sim-004"]["effective_labels"]["disk"] == "hdd"
        code, text = await eru_cli("node", "ls", "--nats", nats_url, "--state-dir", str(tmp_path), columns=400)
        assert code == 0, text
        assert "disk=ssd*" in next(line for line in text.splitlines() if "sim-001" in line)

        deploy = ("deploy", "--pod", "p1", "--image", "busybox", "--mode", "each", "--cpu", "1", "--memory", "64MiB")
        filtered = (*deploy, "--node-label", "disk=ssd", "--node-label", "zone=a", "--exclude-nodes", "sim-002")
        code, out = await _cli(nats_url, tmp_path, *filtered, "-o", "json")
        assert code == 0, out
        done = json.loads(out)
        assert done["status"] == "completed"
        assert done["placements"] == {"sim-001": 1, "sim-003": 1}
        placed = {row["node"] for row in await pipe.containers(deploy_id=done["deploy_id"])}
        assert placed == {"sim-001", "sim-003"}

        decision_id = done["decision_id"]
        code, out = await _cli(nats_url, tmp_path, "explain", decision_id, "-o", "json")
        assert code == 0, out
        why = {entry["node"]: (entry["reason"], entry["why"]) for entry in json.loads(out)["not_chosen"]}
        assert why == {
            "sim-002": ("filtered", "filtered: excluded by --exclude-nodes"),
            "sim-004": ("filtered", "filtered: label disk=ssd does not match (disk=hdd)"),
        }
        row = await pipe.pool.fetchrow("SELECT input, output FROM decisions WHERE id = $1", decision_id)
        problem = await full_input(pipe.pool, json.loads(row["input"]))
        assert problem["node_filter"] == {"exclude_nodes": ["sim-002"], "labels": {"disk": "ssd", "zone": "a"}}
        assert replay(RecordedDecision(decision_id, "deploy", problem, json.loads(row["output"]))).differences == []

        # the operator removes sim-001's disk label: the same filter now matches sim-003 only
        code, out = await _cli(nats_url, tmp_path, "node", "set", "sim-001", "--label", "disk-")
        assert code == 0, out
        code, out = await _cli(nats_url, tmp_path, *filtered, "--name", "again", "-o", "json")
        assert code == 0, out
        assert json.loads(out)["placements"] == {"sim-003": 1}


async def test_bad_filters_are_refused_naming_the_option_and_nothing_is_recorded(
    nats_url: str, postgres_dsn: str, tmp_path: Path
) -> None:
    async with pipeline_with_sim_nodes(nats_url, postgres_dsn, count=4) as pipe:
        code, out = await _cli(nats_url, tmp_path, "node", "set", "sim-001", "--label", "disk=ssd")
        assert code == 0, out
        before = await _recorded(pipe)
        deploy = ("deploy", "--pod", "p1", "--image", "busybox")
        for options, line in (
            (("--node-label", "disk=nvme"), "error: --node-label: disk=nvme matches no node of pod 'p1'"),
            (("--nodes", "sim-001,sim-009"), "error: --nodes: unknown node sim-009 (not in pod 'p1')"),
            (("--nodes", "sim-002", "--node-label", "disk=ssd"), "matches no node of pod 'p1'"),
            (("--node-label", "disk"), "error: --node-label: expected KEY=VALUE, such as disk=ssd (got 'disk')"),
        ):
            code, out = await _cli(nats_url, tmp_path, *deploy, *options)
            assert code == 2, out
            assert line in out, out
            assert len(out.strip().splitlines()) == 1, out
        assert await _recorded(pipe) == before  # nothing half-done: no deploy, no decision

        code, out = await _cli(nats_url, tmp_path, "node", "set", "sim-001", "--label", "engine-")
        assert code == 2, out
        assert "--label: node 'sim-001' has no operator label engine (engine is the agent's)" in out
        code, out = await _cli(nats_url, tmp_path, "node", "set", "sim-001", "--label", "zone-", "--label", "rack=1")
        assert code == 2, out  # all or nothing: rack=1 is not set either
        code, out = await _cli(nats_url, tmp_path, "node", "ls", "-o", "json")
        rows = {row["name"]: row for row in json.loads(out)["nodes"]}
        assert rows["sim-001"]["operator_labels"] == {"disk": "ssd"}
