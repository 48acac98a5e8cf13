"""The images a workload has run (`eru workload history NAME`): its live containers and those retention moved to
`containers_history`, one row per image, oldest first (docs/cli.md "Rolling replace")."""

from __future__ import annotations

from typing import Any

from eru.errors import InvalidInput
from eru.store.queries import QueryStore


async def workload_history(
    store: QueryStore, workload: str | None, pod: str | None, tenant: str | None
) -> list[dict[str, Any]]:
    """One row per image the workload ran: `image`, `first_at`, `last_at` (ISO 8601), `instances` (containers ever),
    `live` (containers running it now). `tenant`: only that tenant's containers (a tenant's query)."""
    if not workload:
        raise InvalidInput("workload", "needed to show a workload's history")
    return [
        {
            "image": run.image,
            "first_at": run.first_at.isoformat() if run.first_at else None,
            "last_at": run.last_at.isoformat() if run.last_at else None,
            "instances": run.instances,
            "live": run.live,
        }
        for run in await store.image_runs(workload, pod, tenant)
    ]
