"""Tenant operations of the allocator (`eru.allocator.tenant-create|tenant-set|tenant-ls|tenant-rm`, SPEC §8).

Amounts stay as the user wrote them (`cpu` in cores, `memory` in bytes or "8GiB"); the allocator checks them with
`eru.fairness.tenant_config` so every error names its field (`quota.memory`, `limit.cpu`, `weight`).
"""

from __future__ import annotations

from pydantic import Field

from eru.domain.messages import Name
from eru.domain.resources import Frozen


class TenantCreateRequest(Frozen):
    """Create a tenant: fairness weight (> 0), guaranteed quota and limit per resource (`cpu`, `memory`)."""

    name: Name
    weight: float | str = 1.0
    quota: dict[str, float | str] = Field(default_factory=dict)
    limit: dict[str, float | str] = Field(default_factory=dict)


class TenantSetRequest(Frozen):
    """Change a tenant; fields left out keep their value, an empty quota/limit object removes it."""

    name: Name
    weight: float | str | None = None
    quota: dict[str, float | str] | None = None
    limit: dict[str, float | str] | None = None


class TenantListRequest(Frozen):
    """Every tenant with its weight, quota, limit and what it holds (in `pod`, or in all pods)."""

    pod: str | None = None


class TenantRemoveRequest(Frozen):
    """Remove a tenant that holds nothing: no live container and no waiting request (`default` always stays)."""

    name: Name
