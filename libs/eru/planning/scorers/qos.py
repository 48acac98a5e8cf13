"""qos-balance (docs/fairness-and-scoring.md "QoS balance", after the "BalancedQosPriority" of Xu and Yang's VM
placement paper): keep every node's QoS mix close to the cluster's.

For an incoming instance of class L: Pn = share of class L among the instances on node n, Pc = share of class L
among all instances in the pod (both before placing it; an empty node or pod counts 0), raw score = 10 · |1 − (Pn −
Pc)| in 0..20, scaled linearly to 0..100 (× 5). The seed keeps the raw score unrounded (float64) and normalises at the
end; a linear scale keeps the plugin weights meaningful (a min-max stretch would turn a 0.001 difference into 100
points and drown every other plugin).
"""

from __future__ import annotations

import numpy as np

from eru.errors import InvalidInput
from eru.planning.scorers.base import MAX_NODE_SCORE, QOS_CLASSES, FloatArray, ScoreState, register_scorer

_RAW_MAX = 20.0


def qos_class(cpu_request: float, cpu_limit: float, memory_request: int, memory_limit: int) -> str:
    """Kubernetes' QoS class from requests and limits (0 = not set): Guaranteed when cpu and memory limits are set
    and equal their requests, BestEffort when nothing is set, Burstable otherwise."""
    if cpu_request == cpu_limit == memory_request == memory_limit == 0:
        return "BestEffort"
    if cpu_limit > 0 and memory_limit > 0 and cpu_request == cpu_limit and memory_request == memory_limit:
        return "Guaranteed"
    return "Burstable"


def qos_index(name: str, field: str = "options.qos_class") -> int:
    """Position of a class name in `QOS_CLASSES`; anything else is an `InvalidInput` on `field`."""
    if name not in QOS_CLASSES:
        raise InvalidInput(field, f"unknown QoS class {name!r} (one of {', '.join(QOS_CLASSES)})")
    return QOS_CLASSES.index(name)


def raw_qos_scores(state: ScoreState) -> FloatArray:
    """10 · |1 − (Pn − Pc)| per node, unscaled (0..20)."""
    if state.qos_class is None:
        raise InvalidInput("options.qos_class", "qos-balance needs the incoming instance's QoS class")
    counts = state.qos_counts
    node_totals = counts.sum(axis=1)
    of_class = counts[:, state.qos_class]
    node_share = np.where(node_totals > 0, of_class / np.where(node_totals > 0, node_totals, 1), 0.0)
    cluster_total = int(node_totals.sum())
    cluster_share = float(of_class.sum()) / cluster_total if cluster_total else 0.0
    result: FloatArray = 10.0 * np.abs(1.0 - (node_share - cluster_share))
    return result


@register_scorer("qos-balance")
def qos_balance(state: ScoreState) -> FloatArray:
    """The raw qos-balance score scaled to 0..100."""
    result: FloatArray = raw_qos_scores(state) * (MAX_NODE_SCORE / _RAW_MAX)
    return result
