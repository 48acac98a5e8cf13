"""`eru plan` kind "drf" (docs/planning.md): progressive filling in hierarchical DRF order over one pod's totals.

```json
{"kind": "drf", "totals": {"cpu": 9, "memory": "18GB"},
 "tenants": [{"name": "A", "weight": 1, "demand": {"cpu": 1, "memory": "4GB"}},
             {"name": "B", "demand": {"cpu": 3, "memory": "1GB"}, "quota": {"cpu": 3}, "limit": {"cpu": 6},
              "max_tasks": null}]}
```
→ `{"tasks": {"A": 3, "B": 2}, "shares": {"A": 0.667, "B": 0.667}, "order": ["A", "B", "A", "B", "A"], ...}`.

`shares` are the weighted dominant shares of docs/fairness-and-scoring.md (max over resources of allocated / total,
divided by the weight) rounded to 3 decimals; `shares_exact` gives them as fractions, `dominant_shares` before dividing
by the weight (weights 1:2 give these 1:2), `allocated` the resources each tenant holds and `stopped` why each tenant
got no further task (`capacity`, `limit`, `headroom` or `max_tasks`, with the numbers).

Two levels: a group is a tenant entry named `tenant/group` (weight, demand, max_tasks); its tenant's entry carries
quota, limit and `reserved` (resources only it may use, counted toward its quota) and may leave out `demand` when
only its groups run tasks. `headroom` (when some tenant has a quota): per guaranteed resource, what the guarantees
still need and what is unreserved and free at the end (docs/fairness-and-scoring.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eru.errors import InvalidInput
from eru.fairness.drf import Tenant
from eru.fairness.filling import FillingTenant, progressive_filling
from eru.fairness.quantities import json_details, json_resources, parse_resources, parse_weight

_TENANT_FIELDS = {"name", "weight", "demand", "quota", "limit", "max_tasks", "reserved"}
_PROBLEM_FIELDS = {"kind", "totals", "tenants", "config"}


def parse_tenant(raw: object, index: int) -> FillingTenant:
    where = f"tenants[{index}]"
    if not isinstance(raw, Mapping):
        raise InvalidInput(where, f"expected an object, got {type(raw).__name__}")
    unknown = set(raw) - _TENANT_FIELDS
    if unknown:
        raise InvalidInput(where, f"unknown fields {sorted(unknown)} (known: {sorted(_TENANT_FIELDS)})")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidInput(f"{where}.name", f"expected a non-empty string, got {name!r}")
    max_tasks = raw.get("max_tasks")
    if max_tasks is not None and (isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 0):
        raise InvalidInput(f"{where}.max_tasks", f"expected an integer ≥ 0 or null, got {max_tasks!r}")
    tenant = Tenant(
        name=name,
        weight=parse_weight(raw.get("weight", 1), f"{where}.weight"),
        quota=parse_resources(raw.get("quota") or {}, f"{where}.quota"),
        limit=parse_resources(raw.get("limit") or {}, f"{where}.limit"),
    )
    demand = None if raw.get("demand") is None else parse_resources(raw["demand"], f"{where}.demand")
    reserved = parse_resources(raw.get("reserved") or {}, f"{where}.reserved")
    return FillingTenant(tenant, demand, max_tasks, reserved)


def solve_drf(problem: Mapping[str, Any]) -> dict[str, Any]:
    """Solve one "drf" problem; `InvalidInput` naming the field for malformed input."""
    if not isinstance(problem, Mapping):
        raise InvalidInput("problem", f"expected a JSON object, got {type(problem).__name__}")
    unknown = set(problem) - _PROBLEM_FIELDS
    if unknown:
        raise InvalidInput(
            "problem", f"unknown fields {sorted(unknown)} for kind drf (known: {sorted(_PROBLEM_FIELDS)})"
        )
    if "totals" not in problem:
        raise InvalidInput("totals", "required: the pod's total resources, e.g. {'cpu': 9, 'memory': '18GB'}")
    totals = parse_resources(problem["totals"], "totals")
    raw_tenants = problem.get("tenants")
    if not isinstance(raw_tenants, list) or not raw_tenants:
        raise InvalidInput("tenants", "expected a non-empty list of tenants")
    tenants = [parse_tenant(raw, index) for index, raw in enumerate(raw_tenants)]
    result = progressive_filling(totals, tenants)
    return {
        "tasks": result.tasks,
        "shares": {name: round(float(share), 3) for name, share in result.shares.items()},
        "shares_exact": {name: str(share) for name, share in result.shares.items()},
        "dominant_shares": {name: round(float(share), 3) for name, share in result.dominant_shares.items()},
        "allocated": {name: json_resources(amounts) for name, amounts in result.allocated.items()},
        "order": result.order,
        "stopped": {name: json_details(reason) for name, reason in result.stopped.items()},
        **({"headroom": json_details(result.headroom)} if result.headroom else {}),
    }
