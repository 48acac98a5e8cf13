"""The pipeline harness's nodes behave like real agents: they heartbeat, so a test that outlasts the allocator's
down window (`node_down_after_seconds`, as any test may on a loaded machine) still finds them schedulable. Before,
a harness node went down 30 s after its registration: `test_dlq_cli`, `test_tenants` and others failed under load
with "pod 'p1' has no schedulable node"."""

from __future__ import annotations

from pipeline_harness import Pipeline, ScriptedNodeAgent

DOWN_AFTER = 2.0


async def test_a_registered_node_stays_schedulable_past_the_down_window(nats_url: str, postgres_dsn: str) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    pipe.heartbeat_seconds = 0.3
    await pipe.start(node_down_after_seconds=DOWN_AFTER)
    agent = ScriptedNodeAgent(pipe.nc)
    await agent.start()
    try:
        await pipe.register("n1")
        registered = await pipe.pool.fetchval("SELECT heartbeat_at FROM node_status WHERE name = 'n1'")

        async def heard_after_the_window() -> bool:
            seen = await pipe.pool.fetchval("SELECT heartbeat_at FROM node_status WHERE name = 'n1'")
            return bool((seen - registered).total_seconds() > DOWN_AFTER)

        await pipe.wait_for(heard_after_the_window, True, within=30.0)
        deploy_id = await pipe.deploy(count=1)
        assert (await pipe.terminal(deploy_id)).kind == "completed"
    finally:
        await agent.stop()
        await pipe.close()
