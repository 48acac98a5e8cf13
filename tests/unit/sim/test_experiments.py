"""The `eru sim` experiments: QoS balance against its own baseline, DRF variants, compaction search and workload."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from eru.planning import PlanningConfig, normalize_request
from eru.planning.scorers import QOS_CLASSES
from eru.sim.compaction import (
    MODES,
    ModeResult,
    NodeShape,
    compaction_experiment,
    lower_bound,
    pending_tasks,
    shuffled,
    smallest_cell,
)
from eru.sim.drf import drf_experiment
from eru.sim.qos import qos_experiment
from eru.sim.workload import GIB, Job, generate_workload, workload_totals


def test_qos_balance_lowers_the_variance_of_every_class_against_the_same_run_without_it() -> None:
    experiment = qos_experiment(3000, 100, seed=7)
    assert experiment.baseline.counts.sum() == experiment.balanced.counts.sum() == 3000
    # Same population, same nodes: the per-class totals agree, only their spread over nodes differs.
    assert experiment.baseline.counts.sum(axis=0).tolist() == experiment.balanced.counts.sum(axis=0).tolist()
    for name in QOS_CLASSES:
        assert experiment.balanced.variance[name] < 0.75 * experiment.baseline.variance[name], name
    assert experiment.balanced.mean_variance < 0.6 * experiment.baseline.mean_variance


def test_qos_variance_is_the_population_variance_of_the_counts() -> None:
    experiment = qos_experiment(400, 20, seed=3)
    counts = experiment.baseline.counts
    for index, name in enumerate(QOS_CLASSES):
        column = counts[:, index].tolist()
        mean = sum(column) / len(column)
        assert experiment.baseline.variance[name] == pytest.approx(sum((c - mean) ** 2 for c in column) / len(column))


def test_drf_variants_canonical_weighted_quota_limit() -> None:
    variants = {variant.name: variant.result for variant in drf_experiment(10)}
    assert variants["canonical"].tasks == {"A": 3, "B": 2}
    assert variants["canonical x10"].tasks == {"A": 30, "B": 20}
    weighted = variants["weights A1:B2"]
    assert weighted.dominant_shares["B"] == 2 * weighted.dominant_shares["A"]
    quota = variants["quota B cpu 80%"]
    assert quota.history[23]["B"] == Fraction(24 * 3, 90)  # B alone climbs to its 72-core quota first
    assert all(step["A"] == 0 for step in quota.history[:24])
    limited = variants["limit A memory 25%"]
    assert limited.allocated["A"]["memory"] <= Fraction(45 * 10**9)
    assert limited.stopped["A"]["reason"] == "limit"


def test_workload_generator_is_deterministic_and_mixes_prod_and_batch() -> None:
    jobs = generate_workload(5, total_memory=1 << 40, prod_fraction=0.7)
    assert jobs == generate_workload(5, total_memory=1 << 40, prod_fraction=0.7)
    assert jobs != generate_workload(6, total_memory=1 << 40, prod_fraction=0.7)
    prod = sum(job.memory * job.tasks for job in jobs if job.klass == "prod")
    batch = sum(job.memory * job.tasks for job in jobs if job.klass == "batch")
    assert prod >= 0.7 * (1 << 40)
    assert batch >= 0.3 * (1 << 40)
    assert any(job.cpu_bind for job in jobs if job.klass == "prod")
    assert not any(job.cpu_bind for job in jobs if job.klass == "batch")
    assert workload_totals(jobs)["tasks"] == sum(job.tasks for job in jobs)
    order = shuffled(jobs, 1)
    assert sorted(order, key=jobs.index) == jobs
    assert [job.klass for job in order] == sorted((job.klass for job in jobs), key=lambda k: k != "prod")


@pytest.mark.parametrize("mode", ["auto", "drained", "score most-allocated"])
def test_smallest_cell_fits_and_one_node_fewer_does_not(mode: str) -> None:
    jobs = generate_workload(2, total_memory=256 * GIB, prod_fraction=0.6)
    shape = NodeShape(cores=16, memory=64 * GIB)
    config = PlanningConfig()
    requests = [normalize_request(job.request(), config) for job in jobs]
    name, scorers = MODES[mode]
    count = smallest_cell(jobs, shape, name, scorers, config)
    allowed = int(0.002 * sum(job.tasks for job in jobs))
    assert count >= lower_bound(jobs, shape)
    assert pending_tasks(jobs, requests, count, shape, name, scorers, config) <= allowed
    if count > lower_bound(jobs, shape):
        assert pending_tasks(jobs, requests, count - 1, shape, name, scorers, config) > allowed


def test_a_task_larger_than_a_node_stays_pending() -> None:
    jobs = [Job("big", "prod", 64.0, 8 * GIB, True, 2), Job("small", "batch", 1.0, GIB, False, 10)]
    config = PlanningConfig()
    requests = [normalize_request(job.request(), config) for job in jobs]
    assert pending_tasks(jobs, requests, 4, NodeShape(32, 64 * GIB), "auto", None, config) == 2


def test_compaction_reports_every_seed_and_the_nearest_rank_p90() -> None:
    jobs = generate_workload(3, total_memory=128 * GIB)
    calls: list[tuple[str, int]] = []
    results = compaction_experiment(
        jobs, shape=NodeShape(16, 64 * GIB), modes=["drained"], seeds=3, progress=lambda m, s: calls.append((m, s))
    )
    assert calls == [("drained", 0), ("drained", 1), ("drained", 2)]
    assert len(results[0].nodes) == 3
    assert ModeResult("x", [5, 1, 2, 3, 4, 6, 7, 8, 9, 11, 10]).p90 == 10
    assert ModeResult("x", [3]).p90 == 3


def test_plots_are_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is not installed: pip install 'eru[plot]'")
    from eru.sim.plots import plot_compaction, plot_drf, plot_qos

    plot_qos(qos_experiment(200, 10, seed=1), tmp_path / "q.png")
    plot_drf(drf_experiment(2)[:2], tmp_path / "d.png")
    plot_compaction([ModeResult("auto", [3, 4, 5])], 3, tmp_path / "c.png")
    for name in ("q.png", "d.png", "c.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.all(np.isfinite(qos_experiment(50, 5).baseline.counts))


@pytest.mark.parametrize("mode", list(MODES))
def test_smallest_cell_above_the_resource_bound_when_tasks_fragment_nodes(mode: str) -> None:
    # 3-core bound tasks on 4-core nodes: one per node, so 10 tasks need 10 nodes although the cores bound is 8.
    jobs = [Job("p", "prod", 3.0, GIB, True, 10)]
    shape = NodeShape(cores=4, memory=64 * GIB)
    config = PlanningConfig()
    name, scorers = MODES[mode]
    assert lower_bound(jobs, shape) == 8
    assert smallest_cell(jobs, shape, name, scorers, config) == 10
    requests = [normalize_request(jobs[0].request(), config)]
    assert pending_tasks(jobs, requests, 9, shape, name, scorers, config) == 1


def test_quota_guarantee_holds_under_a_burst() -> None:
    from eru.sim.guarantee import guarantee_experiment

    guaranteed, plain = guarantee_experiment(cores=100, bursters=3, burst=50, quota=30, steps=60)
    # with the guarantee: 30 cores are held as headroom from step 0, so the burst gets 100 − 30 = 70 (DRF between
    # B1..B3: 24/23/23, ties to fewer allocations then arrival) and G gets its 30 the step it asks
    assert guaranteed.held[0] == {"B1": 24, "B2": 23, "B3": 23, "G": 0}
    assert guaranteed.at_arrival == 30
    assert guaranteed.held[-1]["G"] == 30
    # without: the burst takes all 100 (34/33/33); from step 2 one core frees per step and DRF gives it to G (the
    # lowest share) until all four hold 100 / 4 = 25: G has s − 1 cores at step s, 25 at step 26, never 30
    assert plain.held[0] == {"B1": 34, "B2": 33, "B3": 33, "G": 0}
    assert plain.at_arrival == 0
    assert plain.steps_to(25) == 26
    assert plain.steps_to(30) is None
