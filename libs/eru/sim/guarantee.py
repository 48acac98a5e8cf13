"""Experiment (b2), quota guarantees under a burst (docs/fairness-and-scoring.md: quota is a guarantee, held as
headroom).

One pod of `cores` one-core slots. At step 0 `bursters` tenants each ask `burst` one-core tasks at once; at step 1
tenant G, guaranteed `quota` cores, asks `quota` tasks. After that, every step the oldest running burst task ends
and one admission pass runs (`eru.fairness.admission_order`, the allocator's decision). Two variants: G with its
quota (a guarantee: the pod holds `quota` cores of headroom from the start) and G without (plain DRF). Pure and
deterministic.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from fractions import Fraction

from eru.fairness import PendingRequest, Tenant, TenantUsage, admission_order

ONE = {"cpu": Fraction(1)}


@dataclass(frozen=True, slots=True)
class GuaranteeRun:
    """One variant: cores held per tenant after every step, and G's figures."""

    name: str
    quota: int
    held: list[dict[str, int]] = field(default_factory=list)

    @property
    def at_arrival(self) -> int:
        """G's cores right after its requests arrived (step 1)."""
        return self.held[1]["G"]

    def steps_to(self, cores: int) -> int | None:
        """The first step at which G holds `cores`, None if never within the run."""
        return next((step for step, held in enumerate(self.held) if held["G"] >= cores), None)


def _run(name: str, quota: int, asks: int, cores: int, bursters: int, burst: int, steps: int) -> GuaranteeRun:
    names = [f"B{i + 1}" for i in range(bursters)]
    tenants = {n: Tenant(n) for n in names}
    tenants["G"] = Tenant("G", quota={"cpu": Fraction(quota)}) if quota else Tenant("G")
    pending: list[PendingRequest] = []
    arrival = 0
    for tenant in names:
        for index in range(burst):
            pending.append(PendingRequest(f"{tenant}-{index}", tenant, ONE, 1, arrival))
            arrival += 1
    running: deque[str] = deque()  # burst tasks in the order they started (the oldest ends first)
    held = dict.fromkeys([*names, "G"], 0)
    run = GuaranteeRun(name, quota)
    for step in range(steps + 1):
        if step == 1:
            for index in range(asks):
                pending.append(PendingRequest(f"G-{index}", "G", ONE, 1, arrival))
                arrival += 1
        elif step > 1 and running:
            held[running.popleft().split("-")[0]] -= 1
        usage = {n: TenantUsage({"cpu": Fraction(c)}, c) for n, c in held.items() if c}
        free = {"cpu": Fraction(cores - sum(held.values()))}
        decision = admission_order(pending, tenants, usage, {"cpu": Fraction(cores)}, free)
        admitted = set(decision.admitted)
        for request_id in decision.admitted:
            tenant = request_id.split("-")[0]
            held[tenant] += 1
            if tenant != "G":
                running.append(request_id)
        pending = [request for request in pending if request.id not in admitted]
        run.held.append(dict(held))
    return run


def guarantee_experiment(
    cores: int = 100, bursters: int = 3, burst: int = 50, quota: int = 30, steps: int = 60
) -> list[GuaranteeRun]:
    """G with its quota, and G without one, under the same burst."""
    return [
        _run(f"G quota {quota} (guarantee + headroom)", quota, quota, cores, bursters, burst, steps),
        _run("G without quota (DRF only)", 0, quota, cores, bursters, burst, steps),
    ]
