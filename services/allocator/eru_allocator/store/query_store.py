"""The queries capability (`eru.store.queries.QueryStore`) on PostgreSQL: each listing or lookup one statement on a
connection of the pool (statements in `store.queries`, `store.record_pages` and `store.node_registry`), no
transaction (read-only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from eru.store.decisions import full_input
from eru.store.queries import (
    ContainerFilter,
    ContainerPlace,
    ContainerRecord,
    DeployOwner,
    DeployRecord,
    DeployView,
    ImageRun,
    NodeListing,
    PodCount,
    QueryStore,
    RecordedDecisionRow,
    WorkloadGroup,
)
from eru.store.retention import expired_at
from eru_allocator.store import containers, node_registry, ownership, queries, record_pages


class PgQueries:
    """`QueryStore` over `pool` (see the module doc)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self.pool = pool

    async def node_page(
        self, pod: str | None, node: str | None, down_after_seconds: float, after: str | None, limit: int | None
    ) -> list[NodeListing]:
        """Nodes in name order with usage, reservations, containers and overrides."""
        async with self.pool.acquire() as conn:
            return await node_registry.node_listing(conn, pod, node, down_after_seconds, after, limit)

    async def pod_page(self, after: str | None, limit: int) -> list[PodCount]:
        """Pods in name order with their nodes counted."""
        async with self.pool.acquire() as conn:
            return await record_pages.pod_page(conn, after, limit)

    async def container_page(
        self, which: ContainerFilter, after: tuple[str, datetime, str] | None, limit: int
    ) -> list[ContainerRecord]:
        """Containers in (node, created_at, id) order."""
        async with self.pool.acquire() as conn:
            return await record_pages.container_page(conn, which, after, limit)

    async def deploy(self, key: str) -> DeployRecord | None:
        """The live deploy by id or request key."""
        async with self.pool.acquire() as conn:
            return await record_pages.deploy_row(conn, key)

    async def deploy_history(self, key: str) -> str | None:
        """The deploy moved to history, as JSON text."""
        async with self.pool.acquire() as conn:
            return await record_pages.deploy_history_record(conn, key)

    async def container_history(self, deploy_id: str, limit: int) -> list[str]:
        """The deploy's containers moved to history, as JSON text."""
        async with self.pool.acquire() as conn:
            return await record_pages.container_history_records(conn, deploy_id, limit)

    async def deploy_views(
        self, pod: str | None, limit: int, before: tuple[datetime, str] | None, tenant: str | None
    ) -> list[DeployView]:
        """The newest deploys with their containers counted by state."""
        async with self.pool.acquire() as conn:
            return await queries.deploy_views(conn, pod, limit, before, tenant)

    async def workload_groups(
        self,
        pod: str | None,
        include_gone: bool,
        tenant: str | None,
        after: tuple[str, str, str] | None,
        limit: int,
    ) -> list[WorkloadGroup]:
        """Workloads grouped from their containers."""
        async with self.pool.acquire() as conn:
            return await queries.workload_groups(conn, pod, include_gone, tenant, after, limit)

    async def image_runs(self, workload: str, pod: str | None, tenant: str | None) -> list[ImageRun]:
        """The images a workload ran."""
        async with self.pool.acquire() as conn:
            return await queries.image_runs(conn, workload, pod, tenant)

    async def decision(self, decision_id: str) -> RecordedDecisionRow | None:
        """One recorded decision."""
        async with self.pool.acquire() as conn:
            return await queries.recorded_decision(conn, decision_id)

    async def decision_expired_at(self, decision_id: str) -> datetime | None:
        """One statement on `retention_drops`."""
        async with self.pool.acquire() as conn:
            gone = await expired_at(conn, "decisions", decision_id)
        return None if gone is None else gone[0]

    async def full_input(self, problem: Mapping[str, Any]) -> dict[str, Any]:
        """The snapshot rows of a compact input's chain, one statement each."""
        async with self.pool.acquire() as conn:
            return await full_input(conn, problem)

    async def deploy_expired_at(self, deploy_id: str) -> datetime | None:
        """One statement on `retention_drops` (the `deploys_history` ranges)."""
        async with self.pool.acquire() as conn:
            gone = await expired_at(conn, "deploys_history", deploy_id)
        return None if gone is None else gone[0]

    async def container_place(self, container_id: str, down_after_seconds: float) -> ContainerPlace | None:
        """One statement (the container with its node's heartbeat)."""
        return await containers.place_of(self.pool, container_id, down_after_seconds)

    async def container_tenants(self, container_ids: Sequence[str]) -> dict[str, str]:
        """One statement."""
        return await ownership.container_tenants(self.pool, container_ids)

    async def deploy_owner(self, deploy_id: str, request_id: str | None) -> DeployOwner | None:
        """One statement."""
        return await ownership.deploy_owner(self.pool, deploy_id, request_id)


def _conforms(store: PgQueries) -> QueryStore:
    """Where mypy checks that `PgQueries` is a `QueryStore`."""
    return store
