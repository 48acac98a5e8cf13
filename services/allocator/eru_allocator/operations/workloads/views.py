"""`eru workload ls`: one row per workload (pod, tenant, name) from the containers that run it: its images, its
instances counted by state, its health and how many deploys made them (docs/cli.md "Workloads")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from eru.domain.messages import QueryRequest
from eru.store.transaction import Connection
from eru_allocator.operations import paging

WORKLOADS_SQL = """
SELECT pod, tenant, workload, array_agg(DISTINCT image ORDER BY image) AS images, array_agg(state) AS states,
       count(DISTINCT deploy_id) AS deploys,
       count(*) FILTER (WHERE state = 'running' AND health = 'unhealthy') AS unhealthy,
       count(*) FILTER (WHERE state = 'running' AND health = 'starting') AS starting
  FROM containers
 WHERE ($1::text IS NULL OR pod = $1) AND ($2 OR state NOT IN ('removed', 'failed', 'lost'))
   AND ($3::text IS NULL OR split_part(tenant, '/', 1) = $3)
   AND ($4::text IS NULL OR (pod, tenant, workload) > ($4, $5, $6))
 GROUP BY pod, tenant, workload
 ORDER BY pod, tenant, workload
 LIMIT $7
"""


def health(states: Mapping[str, int], unhealthy: int = 0, starting: int = 0) -> str:
    """`unhealthy` when a running instance's health check fails (`unhealthy`: how many do, as the node agents last
    reported them, docs/node-agent.md "Health and node TTL"); else `healthy` when every live instance runs and none
    is still `starting` its checks (`starting` then), `stopped` when every one was stopped, `degraded` when some run,
    `down` when none does (gone instances, listed with --all, do not count)."""
    live = {state: n for state, n in states.items() if state not in ("removed", "failed", "lost") and n}
    total = sum(live.values())
    running = live.get("running", 0)
    if unhealthy:
        return "unhealthy"
    if total and running == total:
        return "starting" if starting else "healthy"
    if total and live.get("stopped", 0) == total:
        return "stopped"
    return "degraded" if running else "down"


async def workload_rows(
    conn: Connection, req: QueryRequest, tenant: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of workloads, by (pod, tenant, name); `tenant`: only that tenant's (a tenant's query)."""
    after = paging.decode_cursor(req.cursor, 3)
    rows = await conn.fetch(
        WORKLOADS_SQL, req.pod, req.include_gone, tenant, *(after if after else (None, None, None)), req.limit + 1
    )
    out = []
    for row in rows:
        states = dict(sorted(Counter(row["states"]).items()))
        out.append(
            {
                "name": row["workload"],
                "pod": row["pod"],
                "tenant": row["tenant"],
                "images": list(row["images"]),
                "instances": states,
                "health": health(states, row["unhealthy"], row["starting"]),
                "unhealthy": row["unhealthy"],
                "deploys": row["deploys"],
            }
        )
    return paging.fit_page(out, req.limit, lambda row: [row["pod"], row["tenant"], row["name"]])
