"""Experiment (a), QoS balance (docs/fairness-and-scoring.md): place a mixed-QoS population one instance at a
time with the `score` mode, with and without the qos-balance scorer, and compare the variance over nodes of the
per-class counts.

Nodes have real capacities (so least-allocated has something to level); every instance is one `score` placement
request on the current state, exactly as the distributor would see a stream of single-instance deploys. BestEffort
instances request nothing; like Kubernetes (non-zero requests for scoring) they are scored as 0.1 CPU and 200 MiB so
that least-allocated does not pile them on one node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from eru.planning.modes.score import place_scored
from eru.planning.scorers import QOS_CLASSES, ScoreState, get_scorer

MIB = 1 << 20
GIB = 1 << 30
SHARE_BASE = 100
NONZERO_CPU = 10  # pieces: Kubernetes' DefaultMilliCPURequest (0.1 core) at share_base 100
NONZERO_MEMORY = 200 * MIB  # Kubernetes' DefaultMemoryRequest

DEFAULT_MIX: Mapping[str, float] = {"Guaranteed": 0.3, "Burstable": 0.5, "BestEffort": 0.2}
BASELINE: Mapping[str, float] = {"least-allocated": 1}
WITH_QOS: Mapping[str, float] = {"least-allocated": 1, "qos-balance": 1}


@dataclass(frozen=True, slots=True)
class QosRun:
    """One placement run: per node and class the instance counts, and the variance over nodes per class."""

    scorers: dict[str, float]
    counts: np.ndarray  # nodes × classes
    variance: dict[str, float]

    @property
    def mean_variance(self) -> float:
        """Mean over classes of the per-class variance."""
        return float(np.mean(list(self.variance.values())))


@dataclass(frozen=True, slots=True)
class QosExperiment:
    """Baseline and qos-balance runs over the same population and nodes."""

    instances: int
    nodes: int
    mix: dict[str, float]
    baseline: QosRun
    balanced: QosRun


def _population(instances: int, mix: Mapping[str, float], rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Class index and (cpu pieces, memory bytes) request per instance."""
    weights = np.array([mix.get(name, 0.0) for name in QOS_CLASSES], dtype=np.float64)
    classes = rng.choice(len(QOS_CLASSES), size=instances, p=weights / weights.sum())
    cpu = rng.choice(np.array([25, 50, 100, 200, 400]), size=instances, p=[0.2, 0.3, 0.3, 0.15, 0.05])
    memory = (cpu / SHARE_BASE * rng.lognormal(np.log(2.0), 0.5, size=instances) * GIB).astype(np.int64)
    best_effort = classes == QOS_CLASSES.index("BestEffort")
    cpu = np.where(best_effort, NONZERO_CPU, cpu)
    memory = np.where(best_effort, NONZERO_MEMORY, np.maximum(memory, 64 * MIB))
    requests = np.stack([cpu, memory], axis=1).astype(np.int64)
    return classes.astype(np.int64), requests


def run_qos(classes: np.ndarray, requests: np.ndarray, allocatable: np.ndarray, scorers: Mapping[str, float]) -> QosRun:
    """Place every instance in order with `score` and `scorers`; room per node = what its resources still hold."""
    nodes = allocatable.shape[0]
    state = ScoreState(
        resources=("cpu", "memory"),
        allocatable=allocatable.copy(),
        requested=np.zeros_like(allocatable),
        request=np.zeros_like(allocatable),
        resource_weights=np.ones(2, dtype=np.int64),
        qos_counts=np.zeros((nodes, len(QOS_CLASSES)), dtype=np.int64),
        qos_class=None,
    )
    chosen = [(get_scorer(name), float(weight)) for name, weight in scorers.items()]
    for cls, request in zip(classes.tolist(), requests, strict=True):
        state.request = np.broadcast_to(request, allocatable.shape)
        state.qos_class = cls
        fits = np.all(state.requested + request <= allocatable, axis=1).astype(np.int64)
        if not fits.any():
            continue  # the population is sized to fit; an instance that does not would stay pending
        place_scored(state, fits, 1, chosen)
    counts = state.qos_counts.copy()
    variance = {name: float(np.var(counts[:, index])) for index, name in enumerate(QOS_CLASSES)}
    return QosRun(dict(scorers), counts, variance)


def qos_experiment(
    instances: int = 3000,
    nodes: int = 100,
    *,
    seed: int = 1,
    mix: Mapping[str, float] = DEFAULT_MIX,
    node_cpu_cores: int = 64,
    node_memory: int = 256 * GIB,
) -> QosExperiment:
    """Experiment (a): the same population on the same nodes, least-allocated alone vs with qos-balance."""
    rng = np.random.default_rng(seed)
    classes, requests = _population(instances, mix, rng)
    allocatable = np.tile(np.array([node_cpu_cores * SHARE_BASE, node_memory], dtype=np.int64), (nodes, 1))
    return QosExperiment(
        instances=instances,
        nodes=nodes,
        mix=dict(mix),
        baseline=run_qos(classes, requests, allocatable, BASELINE),
        balanced=run_qos(classes, requests, allocatable, WITH_QOS),
    )
