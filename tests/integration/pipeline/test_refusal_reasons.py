"""A batch deploy while every schedulable node of the pod is at its forbid watermark is refused naming the real reason
per node with the numbers — not "no schedulable node (all cordoned, down or none registered)" — and `eru explain
<decision> -o json` lists every node of the pod with its reason; the refusal replays the same (docs/planning.md
"Nodes left out"). Real allocator, distributor, nats-server and PostgreSQL; the watermarks are the eviction service's
`NodeCondition`s as it publishes them."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from pipeline_harness import Pipeline, eru_cli

from eru.bus import RemoteError, new_envelope, publish
from eru.bus.subjects import node_condition
from eru.domain.colocation import NodeCondition
from eru.domain.messages import CordonRequest
from eru.replay import RecordedDecision, replay
from eru.store.decisions import full_input

GiB = 1024**3
AT_FORBID = {"n1": 82.0, "n2": 75.5, "n3": 91.0}


def _batch(cpu: float = 1) -> dict[str, Any]:
    resources = {"cpu_bind": True, "cpu_request": cpu, "memory_request": GiB}
    return {"name": "crunch", "image": "busybox", "priority_class": "batch", "resources": resources}


async def _at_forbid(pipe: Pipeline, name: str, percent: float) -> None:
    condition = NodeCondition(
        node=name,
        time=time.time(),
        state="forbid",
        forbid_schedule_cpu=True,
        cpu_percent=percent,
        watermarks={"cpu_forbid": 70, "cpu_suppress": 80, "cpu_evict": 95, "memory_forbid": 85, "memory_evict": 95},
    )
    await publish(pipe.js, node_condition(name), condition, new_envelope("eru.node.condition", "eviction/test"))


async def test_a_batch_deploy_at_forbid_everywhere_names_each_node_and_its_reason(
    nats_url: str, postgres_dsn: str, tmp_path: Any
) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start()
    try:
        for name in ("n1", "n2", "n3", "n4"):
            await pipe.register(name)
        await pipe.register("n5", beat=False)
        await pipe.op("cordon", CordonRequest(node="n4", cordoned=True))
        # n5's agent went silent five minutes ago (its heartbeat as the store keeps it)
        await pipe.pool.execute("UPDATE node_status SET heartbeat_at = now() - interval '300 s' WHERE name = 'n5'")
        for name, percent in AT_FORBID.items():
            await _at_forbid(pipe, name, percent)
        forbidding = "SELECT count(*) FROM node_status WHERE (conditions->>'forbid_schedule_cpu')::boolean"
        await pipe.wait_for(lambda: pipe.pool.fetchval(forbidding), 3)

        with pytest.raises(RemoteError) as refused:
            await pipe.deploy(count=1, workload=_batch())
        message = refused.value.message
        assert refused.value.code == "no_schedulable_node"
        assert re.fullmatch(
            r"pod 'p1' has no node for this request: 3 at forbid watermark "
            r"\(n1 cpu 82% ≥ 70%, n2 cpu 75\.5% ≥ 70%, n3 cpu 91% ≥ 70%\), 1 cordoned \(n4\), "
            r"1 down \(n5 no heartbeat for 3\d\d s\)",
            message,
        ), message
        assert refused.value.details["left_out_counts"] == {"forbid_watermark": 3, "cordoned": 1, "down": 1}

        deploy_id = refused.value.details["deploy_id"]
        decision_id = await pipe.pool.fetchval("SELECT result->>'decision_id' FROM deploys WHERE id = $1", deploy_id)
        row = await pipe.pool.fetchrow("SELECT input, output FROM decisions WHERE id = $1", decision_id)
        problem = await full_input(pipe.pool, json.loads(row["input"]))
        recorded = RecordedDecision(decision_id, "deploy", problem, json.loads(row["output"]))
        assert replay(recorded).differences == []  # the refusal, its reasons and numbers, reproduce

        code, out = await eru_cli(
            "explain", decision_id, "--nats", nats_url, "--state-dir", str(tmp_path), "-o", "json"
        )
        assert code == 0, out
        doc = json.loads(out)
        assert doc["placed"] == []
        reasons = {entry["node"]: (entry["reason"], entry["why"]) for entry in doc["not_chosen"]}
        assert reasons["n1"] == ("forbid_watermark", "forbid watermark: batch class, cpu 82% ≥ forbid 70%")
        assert reasons["n2"] == ("forbid_watermark", "forbid watermark: batch class, cpu 75.5% ≥ forbid 70%")
        assert reasons["n3"] == ("forbid_watermark", "forbid watermark: batch class, cpu 91% ≥ forbid 70%")
        assert reasons["n4"] == ("cordoned", "cordoned")
        assert reasons["n5"][0] == "down"
        assert re.fullmatch(r"down \(no heartbeat for 3\d\d s\)", reasons["n5"][1])
        assert doc["not_chosen_total"] == 5
        assert doc["not_chosen_counts"] == {"cordoned": 1, "down": 1, "forbid_watermark": 3}

        code, text = await eru_cli("explain", decision_id, "--nats", nats_url, "--state-dir", str(tmp_path))
        assert code == 0, text
        n1_line = next(line for line in text.splitlines() if "│ n1 " in line)
        assert "forbid_watermark" in n1_line
        assert "cpu 82% ≥ forbid 70%" in n1_line
        assert "not chosen: none" not in text
    finally:
        await pipe.close()
