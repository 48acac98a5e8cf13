"""Tenant operations of the allocator (`eru.allocator.tenant-create|tenant-set|tenant-ls|tenant-rm`,
docs/fairness-and-scoring.md).

Amounts stay as the user wrote them (`cpu` in cores, `memory` in bytes or "8GiB"); the allocator checks them with
`eru.fairness.tenant_config` so every error names its field (`quota.memory`, `limit.cpu`, `weight`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from eru.domain.operations import PAGE_SIZE
from eru.domain.resources import Frozen, Name

TenantPath = Annotated[
    str,
    StringConstraints(
        min_length=1, max_length=257, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*(/[A-Za-z0-9][A-Za-z0-9_-]*)?$"
    ),
]
"""A tenant (`team-a`) or one of its groups (`team-a/web`): two levels at most (docs/fairness-and-scoring.md)."""


class TenantCreateRequest(Frozen):
    """Create a tenant: fairness weight (> 0), guaranteed quota and limit per resource (`cpu`, `memory`); or a group
    `tenant/group` of an existing tenant (a weight only)."""

    name: TenantPath
    weight: float | str = 1.0
    quota: dict[str, float | str] = Field(default_factory=dict)
    limit: dict[str, float | str] = Field(default_factory=dict)


class TenantSetRequest(Frozen):
    """Change a tenant or group; fields left out keep their value, an empty quota/limit object removes it."""

    name: TenantPath
    weight: float | str | None = None
    quota: dict[str, float | str] | None = None
    limit: dict[str, float | str] | None = None


class TenantListRequest(Frozen):
    """Every tenant with its weight, quota, limit and what it holds (in `pod`, or in all pods), one page of at most
    `limit` rows at a time, a tenant's groups right after it; `next_cursor` in the reply continues (docs/bus.md,
    paging)."""

    pod: str | None = None
    limit: int = Field(default=PAGE_SIZE, ge=1, le=PAGE_SIZE)
    cursor: str | None = Field(default=None, max_length=1024)


class TenantReserveRequest(Frozen):
    """Reserve `cpu` cores and `memory` on `node` for `tenant` (replaces its earlier reservation there); a group is
    refused by the allocator, naming its tenant."""

    tenant: TenantPath
    node: Name
    cpu: float | str = 0.0
    memory: int | str = 0


class TenantUnreserveRequest(Frozen):
    """Drop `tenant`'s reservation on `node`."""

    tenant: Name
    node: Name


class TenantReservationsRequest(Frozen):
    """Every reservation (of `tenant`, in `pod`) with what the tenant's containers use of it, one page of at most
    `limit` at a time (docs/bus.md, paging)."""

    tenant: str | None = None
    pod: str | None = None
    limit: int = Field(default=PAGE_SIZE, ge=1, le=PAGE_SIZE)
    cursor: str | None = Field(default=None, max_length=1024)


class TenantRemoveRequest(Frozen):
    """Remove a tenant or group that holds nothing: no live container, no waiting request, no group and no
    reservation (`default` always stays)."""

    name: TenantPath
