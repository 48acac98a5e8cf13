"""Whose a container or a deploy is: what a tenant's request is checked against before anything changes
(docs/security.md; a container's tenant never changes, so a check before the operation's own transaction cannot go
stale). Typed rows (docs/allocator.md "The store seam"); `PgQueries` (store.query_store) runs them.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from eru.store.queries import DeployOwner

OWNERS_SQL = "SELECT id, tenant FROM containers WHERE id = ANY($1::text[])"
DEPLOY_OWNER_SQL = "SELECT id, tenant FROM deploys WHERE id = $1 OR request_id = $2 LIMIT 1"


async def container_tenants(pool: asyncpg.Pool, container_ids: Sequence[str]) -> dict[str, str]:
    """container id → its tenant, for those of `container_ids` that exist (unknown ids are absent)."""
    async with pool.acquire() as conn:
        rows = await conn.fetch(OWNERS_SQL, list(container_ids))
    return {row["id"]: row["tenant"] for row in rows}


async def deploy_owner(pool: asyncpg.Pool, deploy_id: str, request_id: str | None) -> DeployOwner | None:
    """The deploy whose id is `deploy_id` or whose request key is `request_id`; None when there is none."""
    async with pool.acquire() as conn:
        row = await conn.fetchrow(DEPLOY_OWNER_SQL, deploy_id, request_id)
    return None if row is None else DeployOwner(row["id"], row["tenant"])


__all__ = ["DeployOwner", "container_tenants", "deploy_owner"]
