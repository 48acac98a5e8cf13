"""A tenant's settings at the user edge → checked, exact values, and the JSON stored in the `tenants` table.

Only the resources the allocator accounts are accepted: `cpu` (cores) and `memory` (bytes, or "8GiB"). Every error
is an `InvalidInput` naming the field (`weight`, `quota.memory`, `limit.gpu`).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from eru.errors import InvalidInput
from eru.fairness.drf import Tenant
from eru.fairness.ledger import is_group
from eru.fairness.quantities import json_number, parse_resources, parse_weight

RESOURCES = ("cpu", "memory")


def parse_amounts(raw: object, field: str) -> dict[str, Fraction]:
    """A quota or limit object: known resources only, each ≥ 0."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidInput(field, f"expected an object {{resource: amount}}, got {type(raw).__name__}")
    for name in raw:
        if name not in RESOURCES:
            raise InvalidInput(f"{field}.{name}", f"unknown resource (known: {', '.join(RESOURCES)})")
    amounts = parse_resources(raw, field)
    if "memory" in amounts and amounts["memory"].denominator != 1:
        raise InvalidInput(f"{field}.memory", "must be a whole number of bytes")
    return amounts


def tenant_from_fields(name: str, weight: object, quota: object, limit: object) -> Tenant:
    """A checked `Tenant` from user input (see `check_settings`)."""
    tenant = Tenant(name, parse_weight(weight, "weight"), parse_amounts(quota, "quota"), parse_amounts(limit, "limit"))
    check_settings(tenant)
    return tenant


def check_settings(tenant: Tenant) -> None:
    """Rules across fields (docs/fairness-and-scoring.md): a group (`tenant/group`) carries a weight only; a quota
    (a guarantee) is at most the limit (a cap) on every resource that has both."""
    if is_group(tenant.name):
        for part, amounts in (("quota", tenant.quota), ("limit", tenant.limit)):
            if amounts:
                raise InvalidInput(
                    part, f"{tenant.name!r} is a group: it carries a weight only (set {part} on its tenant)"
                )
    for name, guaranteed in tenant.quota.items():
        cap = tenant.limit.get(name)
        if cap is not None and guaranteed > cap:
            raise InvalidInput(
                f"quota.{name}",
                f"guarantee {float(guaranteed):g} is above the limit {float(cap):g}: a tenant cannot be promised more "
                "than it may hold",
            )


def stored_amounts(amounts: Mapping[str, Fraction]) -> dict[str, int | float]:
    """Amounts as the JSON numbers stored in the `tenants` table (cores, bytes)."""
    return {name: json_number(amount) for name, amount in amounts.items()}


def tenant_from_row(name: str, weight: Any, quota: Any, limits: Any) -> Tenant:
    """A `Tenant` from its stored row (weight numeric, quota/limits JSON objects; limits NULL = none)."""
    return Tenant(
        name,
        Fraction(str(weight)),
        parse_resources(quota or {}, f"tenants[{name}].quota"),
        parse_resources(limits or {}, f"tenants[{name}].limits"),
    )
