"""Tenants and what they hold, as the allocator's store reads them (docs/fairness-and-scoring.md): the tenants
operators configured and, per tenant, what its live containers request (docs/planning.md normalised requests; a
pending replacement holds nothing of its own yet). Typed rows (docs/allocator.md "The store seam");
`eru_allocator.admission.accounting` decides with them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from eru.domain import ResourceRequest
from eru.errors import InvalidInput
from eru.fairness import Tenant, TenantUsage
from eru.fairness.tenant_config import tenant_from_row
from eru.planning import PlanningConfig, normalize_request
from eru.planning.snapshot import instance_demand
from eru.store.transaction import Connection

TENANTS_SQL = "SELECT name, weight, quota, limits FROM tenants ORDER BY name"
TENANT_SQL = "SELECT name, weight, quota, limits FROM tenants WHERE name = $1"
ENSURE_DEFAULT_SQL = "INSERT INTO tenants (name, weight) VALUES ($1, 1) ON CONFLICT (name) DO NOTHING"
HELD_SQL = """
SELECT tenant, resources, count(*) AS n FROM containers
 WHERE ($1::text IS NULL OR pod = $1) AND state NOT IN ('removed', 'failed', 'lost') AND replaces IS NULL
 GROUP BY tenant, resources
"""


@dataclass(frozen=True)
class Held:
    """`count` live containers of `tenant` with the same stored requirement (`resources`, JSON text)."""

    tenant: str
    resources: str
    count: int


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def json_text(value: Any) -> str:
    """A jsonb value as JSON text (asyncpg hands jsonb over as text: eru.store.pool installs no codec)."""
    return value if isinstance(value, str) else json.dumps(value)


def row_tenant(row: Any) -> Tenant:
    """A `tenants` row (name, weight, quota, limits) as a `Tenant`."""
    return tenant_from_row(row["name"], row["weight"], _loads(row["quota"]), _loads(row["limits"]))


async def load_tenants(conn: Connection) -> dict[str, Tenant]:
    """Every tenant, by name (the table is small: tenants are configured by operators)."""
    return {row["name"]: row_tenant(row) for row in await conn.fetch(TENANTS_SQL)}


async def load_tenant(conn: Connection, name: str) -> Tenant | None:
    """One tenant, or None when unknown."""
    row = await conn.fetchrow(TENANT_SQL, name)
    return None if row is None else row_tenant(row)


async def ensure_tenant(conn: Connection, name: str) -> None:
    """Create tenant `name` with weight 1 unless it exists (the default tenant)."""
    await conn.execute(ENSURE_DEFAULT_SQL, name)


async def held_rows(conn: Connection, pod: str | None) -> list[Held]:
    """What live containers hold (in `pod`, or everywhere), grouped by tenant and stored requirement."""
    rows = await conn.fetch(HELD_SQL, pod)
    return [Held(row["tenant"], json_text(row["resources"]), int(row["n"])) for row in rows]


def add_held(usage: dict[str, TenantUsage], tenant: str, resources: Any, count: int, config: PlanningConfig) -> None:
    """Charge `count` containers with the stored requirement `resources` (JSON) to `tenant` in `usage`."""
    try:
        need = normalize_request(ResourceRequest.model_validate(_loads(resources)), config, "resources")
    except (InvalidInput, ValueError):
        return  # a record from an older model: it is not counted
    current = usage.get(tenant, TenantUsage())
    demand = {name: amount * count for name, amount in instance_demand(need, config.share_base).items()}
    usage[tenant] = current.plus(demand, count)


async def held(conn: Connection, pod: str | None, config: PlanningConfig) -> dict[str, TenantUsage]:
    """Per tenant: what its live containers hold (in `pod`, or everywhere) and how many they are."""
    usage: dict[str, TenantUsage] = {}
    for row in await held_rows(conn, pod):
        add_held(usage, row.tenant, row.resources, row.count, config)
    return usage
