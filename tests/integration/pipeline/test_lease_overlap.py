"""Two allocator replicas that both believe they lease a pod's partition — the moment after a fast takeover from a
peer wrongly thought dead, before it notices at its next renewal (docs/replicas.md "A replica dies") — and every
request sent twice, so that both replicas plan the same request at the same time: the pod lock and the request key
still make one deploy per request with its exact containers, and the usage invariant holds (no double placement)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from pipeline_harness import Pipeline, SimNodes, assert_usage_consistent

from eru.bus import RemoteError

REQUESTS = 24  # each sent twice, concurrently: 48 deliveries over two replicas


async def test_both_replicas_owning_a_pod_never_place_a_request_twice(nats_url: str, postgres_dsn: str) -> None:
    pipe = Pipeline(nats_url, postgres_dsn)
    await pipe.start(replicas=2, deploy_concurrency=4)
    for allocator in pipe.allocators:
        allocator.partitions.owns = lambda _pod: True  # type: ignore[method-assign]  # the overlap: both plan p1
    sims = SimNodes(nats_url, count=3, cores=4)  # 12 cores for up to 24 × 3 × 0.5: the pod fills up
    await sims.start()
    try:
        await pipe.wait_for(lambda: pipe.pool.fetchval("SELECT count(*) FROM nodes"), 3)

        async def send(index: int) -> tuple[str, str | None]:
            body: dict[str, Any] = {
                "request_id": f"overlap-{index}",
                "count": 1 + index % 3,
                "workload": {"name": f"w{index}", "image": "busybox", "resources": {"cpu_request": 0.5}},
            }
            try:
                return "accepted", await pipe.deploy(within=60, **body)
            except RemoteError as error:
                return error.code, error.details.get("deploy_id")

        answers = await asyncio.gather(*(send(i) for i in range(REQUESTS) for _ in range(2)))
        by_request: dict[int, set[tuple[str, str | None]]] = {}
        for position, answer in enumerate(answers):
            by_request.setdefault(position // 2, set()).add(answer)
        # both copies of a request got the same answer: one deploy (or one refusal), never two
        assert all(len(seen) == 1 for seen in by_request.values()), by_request
        rows = await pipe.pool.fetch(
            "SELECT d.request_id, (SELECT count(*) FROM containers c WHERE c.deploy_id = d.id) AS n"
            " FROM deploys d WHERE d.request_id LIKE 'overlap-%'"
        )
        per_request = Counter(row["request_id"] for row in rows)
        assert set(per_request.values()) == {1}, per_request
        accepted = {f"overlap-{i}" for i, seen in by_request.items() if next(iter(seen))[0] == "accepted"}
        assert accepted, answers  # some fit
        for row in rows:
            if row["request_id"] in accepted:
                assert row["n"] == 1 + int(row["request_id"].split("-")[1]) % 3, dict(row)
        await assert_usage_consistent(pipe.pool)
        planned = [a.consumers[0].stats.handled + a.consumers[1].stats.handled for a in pipe.allocators]
        assert all(n > 0 for n in planned), planned  # both replicas really planned requests of the pod
    finally:
        await sims.stop()
        await pipe.close()
