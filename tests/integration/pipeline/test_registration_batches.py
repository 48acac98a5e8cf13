"""Node registrations written a batch per transaction (eru_allocator.nodes.registry.register_many; docs/performance.md
"Registrations a batch per transaction"): 5,000 nodes registering at once were written one transaction each under
the pod lock. A batch keeps every rule of a single registration, and a bad registration fails alone."""

from __future__ import annotations

from nats.js.errors import NotFoundError
from pipeline_harness import Pipeline

from eru.bus import new_envelope, publish
from eru.bus.subjects import node_registration
from eru.domain import NodeRegistration
from eru_allocator.nodes.registry import register_many
from eru_allocator.store.node_store import PgNodes

GiB = 1024**3


def registration(name: str, pod: str, cores: int = 4, **extra: object) -> NodeRegistration:
    return NodeRegistration(
        node=name, pod=pod, cpu_map={str(i): 100 for i in range(cores)}, memory=8 * GiB, runtime="sim", **extra
    )


async def test_a_batch_registers_new_nodes_into_their_pods_and_keeps_known_nodes_where_they_are(
    nats_url: str, postgres_dsn: str
) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start()
    try:
        await pipe.register("moved", pod="p1", beat=False)
        await pipe.pool.execute("INSERT INTO pods (name) VALUES ('ops') ON CONFLICT DO NOTHING")
        await pipe.pool.execute("UPDATE nodes SET pod = 'ops' WHERE name = 'moved'")  # an operator moved it
        batch = [registration(f"b{i}", "p1" if i % 2 else "p2") for i in range(40)]
        batch += [registration("moved", "p1", cores=8), registration("b0", "p2", cores=6)]  # b0 twice: the last wins
        await register_many(PgNodes(pipe.pool), batch)
        rows = {r["name"]: r for r in await pipe.pool.fetch("SELECT name, pod, cpu_map FROM nodes")}
        assert len(rows) == 41
        assert rows["moved"]["pod"] == "ops"  # a known node stays in its pod
        assert '"7": 100' in rows["moved"]["cpu_map"]  # its capacity is the agent's
        assert {rows[f"b{i}"]["pod"] for i in range(1, 40, 2)} == {"p1"}
        assert {rows[f"b{i}"]["pod"] for i in range(0, 40, 2)} == {"p2"}  # pod p2 created on the way
        assert '"5": 100' in rows["b0"]["cpu_map"]
        beats = await pipe.pool.fetchval("SELECT count(*) FROM node_status WHERE name = ANY($1::text[])", list(rows))
        assert beats == 41
    finally:
        await pipe.close()


async def test_registrations_through_the_allocator_and_a_bad_one_fails_alone(nats_url: str, postgres_dsn: str) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start()
    try:
        bad = registration("bad", "p1", numa={"99": "0"})  # core 99 is not in the map
        good = [registration(f"g{i}", "p1") for i in range(60)]
        for item in [*good[:30], bad, *good[30:]]:
            await publish(pipe.js, node_registration(item.node), item, new_envelope("eru.node.registered", "test"))
        count = "SELECT count(*) FROM nodes WHERE name LIKE 'g%'"
        await pipe.wait_for(lambda: pipe.pool.fetchval(count), 60)

        async def dead_letter_field() -> str | None:
            try:
                dead = await pipe.js.get_last_msg("ERU_DLQ", "eru.dlq.eru.node.bad.registered")
            except NotFoundError:
                return None
            return (dead.headers or {}).get("Eru-Dlq-Field")

        await pipe.wait_for(dead_letter_field, "numa.99")
        assert await pipe.pool.fetchval("SELECT count(*) FROM nodes WHERE name = 'bad'") == 0
    finally:
        await pipe.close()
