"""A synthetic workload with realistic request sizes and a prod/batch mix (after the Borg paper's cells, Verma et al.,
EuroSys 2015).

Borg's request sizes cluster on a few "sweet spots" (whole and half cores, round memory sizes) with little
correlation between CPU and memory, and job sizes are heavy-tailed (most jobs have few tasks, a few have many). So:

* prod jobs: CPU from {0.5, 1, 1.5, 2, 4, 8} cores (most at 1–2), half of them `cpu_bind` (latency-sensitive, bound
  cores; Eru's CPU-prime); memory = CPU × a log-normal GiB-per-core ratio (median 4), rounded to 256 MiB;
  tasks per job log-normal (median 8, capped at 200).
* batch jobs: memory-prime (`cpu_bind` false; CPU by CFS quota, not reserved), CPU from {0.1, 0.25, 0.5, 1, 2},
  memory median 2 GiB per core (at least 128 MiB), tasks per job log-normal (median 20, capped at 500).

Jobs are drawn until the requested memory of each class reaches its share of `total_memory`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIB = 1 << 20
GIB = 1 << 30

_PROD_CPU = ([0.5, 1.0, 1.5, 2.0, 4.0, 8.0], [0.15, 0.3, 0.15, 0.25, 0.1, 0.05])
_BATCH_CPU = ([0.1, 0.25, 0.5, 1.0, 2.0], [0.2, 0.25, 0.3, 0.2, 0.05])


@dataclass(frozen=True, slots=True)
class Job:
    """One deploy request of the workload: `tasks` instances of one resource request."""

    name: str
    klass: str  # "prod" or "batch"
    cpu: float  # cores
    memory: int  # bytes
    cpu_bind: bool
    tasks: int

    def request(self) -> dict[str, object]:
        """The raw resource request (docs/planning.md) for the planning core."""
        return {
            "cpu_bind": self.cpu_bind,
            "cpu_request": self.cpu,
            "cpu_limit": self.cpu,
            "memory_request": self.memory,
            "memory_limit": self.memory,
        }


def _round_memory(value: float, step: int) -> int:
    return max(step, round(value / step) * step)


def _job(rng: np.random.Generator, index: int, klass: str) -> Job:
    if klass == "prod":
        cpu = float(rng.choice(_PROD_CPU[0], p=_PROD_CPU[1]))
        memory = _round_memory(cpu * rng.lognormal(np.log(4.0), 0.6) * GIB, 256 * MIB)
        tasks = int(min(200, max(1, round(rng.lognormal(np.log(8.0), 1.0)))))
        return Job(f"prod-{index:04d}", klass, cpu, memory, bool(rng.random() < 0.5), tasks)
    cpu = float(rng.choice(_BATCH_CPU[0], p=_BATCH_CPU[1]))
    memory = _round_memory(cpu * rng.lognormal(np.log(2.0), 0.7) * GIB, 128 * MIB)
    tasks = int(min(500, max(1, round(rng.lognormal(np.log(20.0), 1.0)))))
    return Job(f"batch-{index:04d}", klass, cpu, memory, False, tasks)


def generate_workload(seed: int, *, total_memory: int = 4 << 40, prod_fraction: float = 0.6) -> list[Job]:
    """Jobs (prod first, then batch) whose requested memory adds up to about `total_memory`, `prod_fraction` of it
    prod."""
    if not 0 <= prod_fraction <= 1:
        raise ValueError(f"prod_fraction must be within 0..1, got {prod_fraction}")
    rng = np.random.default_rng(seed)
    jobs: list[Job] = []
    for klass, share in (("prod", prod_fraction), ("batch", 1 - prod_fraction)):
        target = total_memory * share
        total = 0
        while total < target:
            job = _job(rng, len(jobs), klass)
            jobs.append(job)
            total += job.memory * job.tasks
    return jobs


def workload_totals(jobs: list[Job]) -> dict[str, float]:
    """Tasks, requested cores (bound and all) and memory of a workload."""
    return {
        "jobs": len(jobs),
        "tasks": sum(job.tasks for job in jobs),
        "cpu": sum(job.cpu * job.tasks for job in jobs),
        "bound_cpu": sum(job.cpu * job.tasks for job in jobs if job.cpu_bind),
        "memory": sum(job.memory * job.tasks for job in jobs),
    }
