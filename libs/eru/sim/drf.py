"""Experiment (b), DRF (docs/fairness-and-scoring.md): the canonical example and weighted / quota / limit
variants, solved by progressive filling, with every tenant's dominant share after each task (for the "shares over time"
plot)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from eru.fairness.filling import FillingResult, progressive_filling
from eru.fairness.plan_kind import parse_tenant
from eru.fairness.quantities import parse_resources


@dataclass(frozen=True, slots=True)
class DrfVariant:
    """One scenario: a `drf` problem as `eru plan` takes it, and its outcome."""

    name: str
    problem: dict[str, Any]
    result: FillingResult

    def raw_history(self) -> list[dict[str, float]]:
        """Unweighted dominant shares after each task, per tenant."""
        weights = {t["name"]: Fraction(str(t.get("weight", 1))) for t in self.problem["tenants"]}
        return [{name: float(share * weights[name]) for name, share in step.items()} for step in self.result.history]


def _tenant(name: str, cpu: int, memory: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "demand": {"cpu": cpu, "memory": memory}, **extra}


def _variants(scale: int) -> dict[str, dict[str, Any]]:
    totals = {"cpu": 9 * scale, "memory": f"{18 * scale}GB"}
    return {
        "canonical": {
            "totals": {"cpu": 9, "memory": "18GB"},
            "tenants": [_tenant("A", 1, "4GB"), _tenant("B", 3, "1GB")],
        },
        f"canonical x{scale}": {"totals": totals, "tenants": [_tenant("A", 1, "4GB"), _tenant("B", 3, "1GB")]},
        "weights A1:B2": {
            "totals": totals,
            "tenants": [_tenant("A", 1, "4GB", weight=1), _tenant("B", 3, "1GB", weight=2)],
        },
        "weights A2:B1": {
            "totals": totals,
            "tenants": [_tenant("A", 1, "4GB", weight=2), _tenant("B", 3, "1GB", weight=1)],
        },
        "quota B cpu 80%": {
            "totals": totals,
            "tenants": [_tenant("A", 1, "4GB"), _tenant("B", 3, "1GB", quota={"cpu": round(0.8 * 9 * scale)})],
        },
        "limit A memory 25%": {
            "totals": totals,
            "tenants": [
                _tenant("A", 1, "4GB", limit={"memory": f"{round(0.25 * 18 * scale)}GB"}),
                _tenant("B", 3, "1GB"),
            ],
        },
        "three tenants": {
            "totals": totals,
            "tenants": [_tenant("A", 1, "4GB"), _tenant("B", 3, "1GB"), _tenant("C", 1, "1GB", weight=2)],
        },
    }


def solve_problem(problem: Mapping[str, Any]) -> FillingResult:
    """Progressive filling over a `drf` problem (the same parsing as `eru plan`)."""
    totals = parse_resources(problem["totals"], "totals")
    tenants = [parse_tenant(raw, index) for index, raw in enumerate(problem["tenants"])]
    return progressive_filling(totals, tenants)


def drf_experiment(scale: int = 10) -> list[DrfVariant]:
    """Every variant solved; `scale` multiplies the pod for the variants after the canonical one."""
    return [DrfVariant(name, problem, solve_problem(problem)) for name, problem in _variants(scale).items()]
