"""Scoring plugins of the `score` placement mode (docs/placement-modes.md): least-allocated, most-allocated,
balanced-allocation (Kubernetes v1.30 formulas) and qos-balance. See docs/fairness-and-scoring.md."""

from eru.planning.scorers.base import (
    MAX_NODE_SCORE,
    QOS_CLASSES,
    Scorer,
    ScoreState,
    get_scorer,
    register_scorer,
    scorer_names,
)
from eru.planning.scorers.options import DEFAULT_SCORERS, NodeLoad, build_state, merge_weights, score_options
from eru.planning.scorers.qos import qos_balance, qos_class, raw_qos_scores
from eru.planning.scorers.resources import balanced_allocation, least_allocated, most_allocated

__all__ = [
    "DEFAULT_SCORERS",
    "MAX_NODE_SCORE",
    "QOS_CLASSES",
    "NodeLoad",
    "ScoreState",
    "Scorer",
    "balanced_allocation",
    "build_state",
    "get_scorer",
    "least_allocated",
    "merge_weights",
    "most_allocated",
    "qos_balance",
    "qos_class",
    "raw_qos_scores",
    "register_scorer",
    "score_options",
    "scorer_names",
]
