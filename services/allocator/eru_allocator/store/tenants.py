"""The tenants capability (`eru.store.tenants.TenantStore`) on PostgreSQL: the `tenants` table, what live containers
hold per tenant (`store.accounting`), waiting requests per tenant (`deploy_waits`), and what keeps a tenant from being
removed. A change of weight, quota or limit wakes the admission loops of the pods with waiting requests
(`pg_notify('eru_admission', pod)`, docs/pipeline.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction

import asyncpg

from eru.fairness import Tenant, TenantUsage
from eru.fairness.ledger import is_group, parent_of
from eru.fairness.tenant_config import stored_amounts
from eru.planning import NodeResources, PlanningConfig
from eru.store import transaction
from eru.store.tenants import Created, PodReservations, TenantHoldings
from eru.store.transaction import Connection
from eru_allocator.store import reservations
from eru_allocator.store.accounting import ensure_tenant, held, load_tenants, row_tenant
from eru_allocator.store.sql import schedulable_nodes

DEFAULT_TENANT = "default"
EXISTS_SQL = "SELECT 1 FROM tenants WHERE name = $1"
INSERT_SQL = "INSERT INTO tenants (name, weight, quota, limits, parent) VALUES ($1, $2, $3::jsonb, $4::jsonb, $5)"
LOCK_SQL = "SELECT name, weight, quota, limits FROM tenants WHERE name = $1 FOR UPDATE"
NAMES_SQL = "SELECT name FROM tenants ORDER BY name LIMIT $1"
UPDATE_SQL = "UPDATE tenants SET weight = $2, quota = $3::jsonb, limits = $4::jsonb WHERE name = $1"
WAKE_ADMISSION_SQL = "SELECT pg_notify('eru_admission', pod) FROM (SELECT DISTINCT pod FROM deploy_waits) p"
LIVE_SQL = "SELECT count(*) FROM containers WHERE tenant = $1 AND state NOT IN ('removed', 'failed', 'lost')"
WAITING_SQL = "SELECT count(*) FROM deploy_waits WHERE tenant = $1"
GROUPS_SQL = "SELECT name FROM tenants WHERE parent = $1 ORDER BY name"
RESERVED_NODES_SQL = "SELECT node FROM tenant_reservations WHERE tenant = $1 ORDER BY node"
DELETE_SQL = "DELETE FROM tenants WHERE name = $1"
WAITING_BY_TENANT_SQL = (
    "SELECT tenant, count(*) AS n FROM deploy_waits WHERE ($1::text IS NULL OR pod = $1) GROUP BY tenant"
)
POD_NAMES_SQL = "SELECT name FROM pods ORDER BY name"


async def waiting_by_tenant(conn: Connection, pod: str | None) -> dict[str, int]:
    """Waiting requests per tenant or group in `pod` (all pods: None)."""
    return {row["tenant"]: int(row["n"]) for row in await conn.fetch(WAITING_BY_TENANT_SQL, pod)}


async def pod_names(conn: Connection) -> list[str]:
    """Every pod's name in name order."""
    return [row["name"] for row in await conn.fetch(POD_NAMES_SQL)]


def weight_text(weight: Fraction) -> str:
    """A weight as the numeric column takes it (weights come from decimals: numerator / denominator is exact)."""
    return str(Decimal(weight.numerator) / Decimal(weight.denominator))


class PgTenants:
    """`TenantStore` over `pool` (see the module doc)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def tenant_configs(self) -> dict[str, Tenant]:
        """Every tenant and group by name (the default tenant created first when missing)."""
        async with self.pool.acquire() as conn:
            await ensure_tenant(conn, DEFAULT_TENANT)
            return await load_tenants(conn)

    async def tenant_names(self, limit: int) -> list[str]:
        """Some tenant names in name order."""
        return [row["name"] for row in await self.pool.fetch(NAMES_SQL, limit)]

    async def create_tenant(self, tenant: Tenant) -> Created:
        """Insert `tenant` (its parent, for a group); "exists" on the name's unique violation."""
        parent = parent_of(tenant.name) if is_group(tenant.name) else None
        async with transaction(self.pool) as conn:
            if parent is not None and await conn.fetchval(EXISTS_SQL, parent) is None:
                return "unknown parent"
            try:
                await conn.execute(
                    INSERT_SQL,
                    tenant.name,
                    weight_text(tenant.weight),
                    json.dumps(stored_amounts(tenant.quota)),
                    json.dumps(stored_amounts(tenant.limit)),
                    parent,
                )
            except asyncpg.UniqueViolationError:
                return "exists"
        return "created"

    async def update_tenant(self, name: str, change: Callable[[Tenant], Tenant]) -> Tenant | None:
        """Lock the row, write `change(old)`, wake the admission loops; None when unknown."""
        async with transaction(self.pool) as conn:
            row = await conn.fetchrow(LOCK_SQL, name)
            if row is None:
                return None
            new = change(row_tenant(row))
            await conn.execute(
                UPDATE_SQL,
                name,
                weight_text(new.weight),
                json.dumps(stored_amounts(new.quota)),
                json.dumps(stored_amounts(new.limit)),
            )
            await conn.execute(WAKE_ADMISSION_SQL)
        return new

    async def remove_tenant(self, name: str, check: Callable[[TenantHoldings], None]) -> bool:
        """Lock the row, `check` what the tenant holds, delete it; False when unknown."""
        async with transaction(self.pool) as conn:
            if await conn.fetchrow(LOCK_SQL, name) is None:
                return False
            holdings = TenantHoldings(
                live=int(await conn.fetchval(LIVE_SQL, name)),
                waiting=int(await conn.fetchval(WAITING_SQL, name)),
                groups=[row["name"] for row in await conn.fetch(GROUPS_SQL, name)],
                reserved_nodes=[row["node"] for row in await conn.fetch(RESERVED_NODES_SQL, name)],
            )
            check(holdings)
            await conn.execute(DELETE_SQL, name)
        return True

    async def held_by_tenant(self, pod: str | None, config: PlanningConfig) -> dict[str, TenantUsage]:
        """What each tenant and group holds in `pod` (all pods: None)."""
        async with self.pool.acquire() as conn:
            return await held(conn, pod, config)

    async def schedulable_capacity(self, pod: str | None, down_after_seconds: float) -> list[NodeResources]:
        """One statement for the pod names (when None), then one per pod."""
        async with self.pool.acquire() as conn:
            pods = [pod] if pod is not None else await pod_names(conn)
            nodes: list[NodeResources] = []
            for name in pods:
                nodes += (await schedulable_nodes(conn, name, down_after_seconds))[0]
        return nodes

    async def pod_reservations(self, pod: str, config: PlanningConfig) -> PodReservations:
        """The reservation rows, then (when there are any) what each tenant holds per node."""
        async with self.pool.acquire() as conn:
            fairness = await reservations.load(conn, pod, config)
        return PodReservations(fairness.reservations, fairness.held)

    async def waiting_by_tenant(self, pod: str | None) -> dict[str, int]:
        """Waiting requests per tenant or group in `pod` (all pods: None)."""
        async with self.pool.acquire() as conn:
            return await waiting_by_tenant(conn, pod)
