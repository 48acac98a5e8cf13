"""`eru workload ls`: one row per workload (pod, tenant, name) from the containers that run it: its images, its
instances counted by state, its health and how many deploys made them (docs/cli.md "Workloads")."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from eru.domain.messages import QueryRequest
from eru.store.queries import QueryStore
from eru_allocator.operations import paging


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
    store: QueryStore, req: QueryRequest, tenant: str | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """One page of workloads, by (pod, tenant, name); `tenant`: only that tenant's (a tenant's query)."""
    after = paging.decode_cursor(req.cursor, 3)
    groups = await store.workload_groups(
        req.pod, req.include_gone, tenant, (after[0], after[1], after[2]) if after else None, req.limit + 1
    )
    out = []
    for group in groups:
        states = dict(sorted(Counter(group.states).items()))
        out.append(
            {
                "name": group.workload,
                "pod": group.pod,
                "tenant": group.tenant,
                "images": group.images,
                "instances": states,
                "health": health(states, group.unhealthy, group.starting),
                "unhealthy": group.unhealthy,
                "deploys": group.deploys,
            }
        )
    return paging.fit_page(out, req.limit, lambda row: [row["pod"], row["tenant"], row["name"]])
