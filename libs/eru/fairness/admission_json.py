"""Admission decisions as JSON in → JSON out, so the allocator can record the input with the decision and replay it.

```json
{"totals": {"cpu": 9, "memory": "18GB"}, "free": {"cpu": 3, "memory": "5GB"},
 "tenants": [{"name": "A", "weight": 1, "quota": {}, "limit": {"cpu": 8},
              "allocated": {"cpu": 3, "memory": "12GB"}, "allocations": 3}],
 "pending": [{"id": "d-17", "tenant": "A", "demand": {"cpu": 1, "memory": "4GB"}, "instances": 1, "arrival": 17}]}
```
→ `{"admitted": ["d-17"], "waiting": [{"id", "code", "message", "details"}], "rejected": [...]}` (see
`admission_order`). `demand` is the whole request (all its instances): what its tenant is charged, CPU requested
whether bound or not. `reserves` (optional, default `demand`) is the part taken from the pod's free resources: bound
cores and memory (unbound CPU may be oversold on a node). Groups are tenants named `tenant/group` (a
weight only; `allocated` is each leaf's own). A tenant may carry `reserved` (what it reserved in the pod) and
`reserved_used` (the part its containers use); the answer then has `headroom`: per guaranteed resource, what the
quota guarantees need and what is unreserved and free after the admissions.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from eru.errors import InvalidInput
from eru.fairness.admission import PendingRequest, Verdict, admission_order
from eru.fairness.drf import Tenant, TenantUsage, check_tenant
from eru.fairness.ledger import check_groups, is_group, parent_of
from eru.fairness.quantities import json_details, parse_resources, parse_weight

_TENANT_FIELDS = {"name", "weight", "quota", "limit", "allocated", "allocations", "reserved", "reserved_used"}
_PENDING_FIELDS = {"id", "tenant", "demand", "instances", "arrival", "reserves"}


def _count(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(field, f"expected an integer ≥ 0, got {value!r}")
    return value


def _object(value: object, field: str, known: set[str]) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(field, f"expected an object, got {type(value).__name__}")
    unknown = set(value) - known
    if unknown:
        raise InvalidInput(field, f"unknown fields {sorted(unknown)} (known: {sorted(known)})")
    return value


def _list(problem: Mapping[str, Any], name: str) -> list[Any]:
    value = problem.get(name, [])
    if not isinstance(value, list):
        raise InvalidInput(name, f"expected a list, got {type(value).__name__}")
    return value


def solve_admission(problem: Mapping[str, Any]) -> dict[str, Any]:
    """Which pending requests to admit now, in order (`admission_order` over JSON)."""
    problem = _object(problem, "problem", {"kind", "totals", "free", "tenants", "pending"})
    if "totals" not in problem:
        raise InvalidInput("totals", "required: the pod's total resources")
    totals = parse_resources(problem["totals"], "totals")
    free = parse_resources(problem.get("free", problem["totals"]), "free")
    tenants: dict[str, Tenant] = {}
    usage: dict[str, TenantUsage] = {}
    reserved: dict[str, dict[str, Fraction]] = {}
    reserved_used: dict[str, dict[str, Fraction]] = {}
    for index, raw in enumerate(_list(problem, "tenants")):
        where = f"tenants[{index}]"
        entry = _object(raw, where, _TENANT_FIELDS)
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidInput(f"{where}.name", f"expected a non-empty string, got {name!r}")
        if name in tenants:
            raise InvalidInput(f"{where}.name", f"duplicate tenant {name!r}")
        tenant = Tenant(
            name,
            parse_weight(entry.get("weight", 1), f"{where}.weight"),
            parse_resources(entry.get("quota") or {}, f"{where}.quota"),
            parse_resources(entry.get("limit") or {}, f"{where}.limit"),
        )
        check_tenant(tenant, totals, where)
        tenants[name] = tenant
        usage[name] = TenantUsage(
            parse_resources(entry.get("allocated") or {}, f"{where}.allocated"),
            _count(entry.get("allocations", 0), f"{where}.allocations"),
        )
        for key, target in (("reserved", reserved), ("reserved_used", reserved_used)):
            if entry.get(key):
                if is_group(name):
                    raise InvalidInput(f"{where}.{key}", "reservations belong to a tenant, not to a group")
                target[name] = parse_resources(entry[key], f"{where}.{key}")
    for index, name in enumerate(tenants):
        if is_group(name) and parent_of(name) not in tenants:
            raise InvalidInput(f"tenants[{index}].name", f"group of unknown tenant {parent_of(name)!r}")
    check_groups(tenants)
    pending = []
    for index, raw in enumerate(_list(problem, "pending")):
        where = f"pending[{index}]"
        entry = _object(raw, where, _PENDING_FIELDS)
        request_id, tenant_name = entry.get("id"), entry.get("tenant")
        if not isinstance(request_id, str) or not request_id:
            raise InvalidInput(f"{where}.id", f"expected a non-empty string, got {request_id!r}")
        if not isinstance(tenant_name, str):
            raise InvalidInput(f"{where}.tenant", f"expected a tenant name, got {tenant_name!r}")
        pending.append(
            PendingRequest(
                request_id,
                tenant_name,
                parse_resources(entry.get("demand", {}), f"{where}.demand"),
                _count(entry.get("instances", 1), f"{where}.instances"),
                _count(entry.get("arrival", index), f"{where}.arrival"),
                None if "reserves" not in entry else parse_resources(entry["reserves"], f"{where}.reserves"),
            )
        )
    decision = admission_order(pending, tenants, usage, totals, free, reserved=reserved, reserved_used=reserved_used)
    answer: dict[str, Any] = {
        "admitted": decision.admitted,
        "waiting": [_verdict(verdict) for verdict in decision.waiting],
        "rejected": [_verdict(verdict) for verdict in decision.rejected],
    }
    if decision.headroom:
        answer["headroom"] = json_details(decision.headroom)
    return answer


def _verdict(verdict: Verdict) -> dict[str, Any]:
    return {
        "id": verdict.id,
        "code": verdict.code,
        "message": verdict.message,
        "details": json_details(verdict.details),
    }
