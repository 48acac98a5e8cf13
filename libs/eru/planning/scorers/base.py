"""What the `score` mode's plugins see, and their registry.

A scorer maps the nodes' state to one score per node on Kubernetes' scale 0..`MAX_NODE_SCORE` (higher = better);
the mode sums the scores times the plugin weights and places the next instance on the best node. State is columns
(numpy), one row per node in input order, so one step costs a few vector operations whatever the node count.

Resources are integers in the node's own units (CPU in pieces, memory in bytes): `allocatable` is what the node has,
`requested` what the instances already on it requested (before the incoming one), `request` what one incoming
instance adds there (the same row on every node, except in the usage/rate fallback). QoS counts are per node and
per class in `QOS_CLASSES` order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from eru.errors import InvalidInput

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

MAX_NODE_SCORE = 100
"""Kubernetes' `framework.MaxNodeScore`: every plugin scores on 0..100."""

NATIVE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "primary"})
"""Resources always scored. Every other name is a scalar (extended) resource, which Kubernetes v1.30 leaves out of
scoring when the incoming pod does not request it (`calculateResourceAllocatableRequest` returns 0, 0): otherwise an
idle GPU would make a node look emptier to a pod that cannot use it (docs/fairness-and-scoring.md)."""

QOS_CLASSES = ("Guaranteed", "Burstable", "BestEffort")


@dataclass(slots=True)
class ScoreState:
    """Per-node columns the scorers read; the `score` mode updates them in place as it places instances."""

    resources: tuple[str, ...]
    allocatable: IntArray  # nodes × resources
    requested: IntArray  # nodes × resources, before the incoming instance
    request: IntArray  # nodes × resources: what one incoming instance adds on each node
    resource_weights: IntArray  # resources: weights for least/most-allocated
    qos_counts: IntArray  # nodes × len(QOS_CLASSES)
    qos_class: int | None  # index into QOS_CLASSES of the incoming instance (None: unknown)

    def counted(self) -> BoolArray:
        """nodes × resources: which amounts the resource scorers count — allocatable > 0, and for a scalar resource
        (not in `NATIVE_RESOURCES`) only when the incoming instance requests some of it."""
        scalar = np.array([name not in NATIVE_RESOURCES for name in self.resources], dtype=bool)
        unrequested = scalar & (self.request == 0)
        mask: BoolArray = (self.allocatable > 0) & ~unrequested
        return mask

    def place(self, node: int) -> None:
        """Account one incoming instance on `node`."""
        self.requested[node] += self.request[node]
        if self.qos_class is not None:
            self.qos_counts[node, self.qos_class] += 1


Scorer = Callable[[ScoreState], FloatArray]

_SCORERS: dict[str, Scorer] = {}


def register_scorer(name: str) -> Callable[[Scorer], Scorer]:
    """Decorator: make a scorer available to the `score` mode under `name`."""

    def decorate(scorer: Scorer) -> Scorer:
        _SCORERS[name] = scorer
        return scorer

    return decorate


def get_scorer(name: str, field: str = "options.scorers") -> Scorer:
    """The scorer registered under `name`; unknown names are an `InvalidInput` on `field`."""
    scorer = _SCORERS.get(name)
    if scorer is None:
        raise InvalidInput(f"{field}.{name}", f"unknown scorer (known: {', '.join(sorted(_SCORERS))})")
    return scorer


def scorer_names() -> list[str]:
    """Every registered scorer, sorted."""
    return sorted(_SCORERS)
