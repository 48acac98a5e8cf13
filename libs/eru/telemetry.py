"""Prometheus metrics shared by every service (served on `/metrics` of the service's loopback health port).

The bus records messages, handling latency, consumer lag and request/reply traffic by itself; services add their
domain counters (`ALLOCATIONS`, `EVICTIONS`, `ERRORS`) where the decision is committed. Label values are bounded:
consumer durable names, fixed request subjects, outcomes, and reasons from a closed set — never ids.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client import generate_latest as _generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

MESSAGES = Counter(
    "eru_messages_total",
    "JetStream messages taken by a consumer, by outcome (handled, retried, rejected, dead_lettered).",
    ["consumer", "outcome"],
)
HANDLE_SECONDS = Histogram(
    "eru_message_handle_seconds",
    "Time a consumer's handler took for one message.",
    ["consumer"],
    buckets=LATENCY_BUCKETS,
)
CONSUMER_PENDING = Gauge(
    "eru_consumer_pending_messages",
    "Messages waiting in the stream for this consumer after the last delivery (consumer lag).",
    ["consumer"],
)
IN_FLIGHT = Gauge("eru_messages_in_flight", "Messages being handled right now.", ["consumer"])
REQUESTS = Counter(
    "eru_requests_total",
    "Requests answered by a request/reply responder, by outcome (ok, error).",
    ["subject", "outcome"],
)
REQUEST_SECONDS = Histogram("eru_request_seconds", "Time to answer one request.", ["subject"], buckets=LATENCY_BUCKETS)
ALLOCATIONS = Counter("eru_allocations_total", "Containers allocated (committed plans).", ["pod"])
EVICTIONS = Counter("eru_evictions_total", "Containers evicted, by reason.", ["reason"])
# The kill path (docs/colocation.md "Kill-path metrics"): node and workload names are bounded by the pod's size.
COLOCATION_EVICTIONS = Counter(
    "eru_colocation_evictions_total",
    "Batch containers evicted, by reason, node and workload.",
    ["reason", "node", "workload"],
)
COLOCATION_SUPPRESSIONS = Counter(
    "eru_colocation_suppressions_total", "Suppress decisions (CFS quota cuts of a node's batch), by node.", ["node"]
)
COLOCATION_BUDGET_REFUSALS = Counter(
    "eru_colocation_budget_refusals_total",
    "Evictions an eviction budget refused (the node is only suppressed), by workload.",
    ["workload"],
)
COLOCATION_REPLACEMENTS = Counter(
    "eru_colocation_replacements_total",
    "Evicted or lost batch instances placed again by eru, by workload.",
    ["workload"],
)
COLOCATION_GIVE_UPS = Counter(
    "eru_colocation_give_ups_total",
    "Batch instances eru stopped re-placing (maximum evictions), by workload.",
    ["workload"],
)
WORK_LOST_BUCKETS = (1.0, 10.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0)
COLOCATION_WORK_LOST = Histogram(
    "eru_colocation_work_lost_cpu_seconds",
    "Batch work (CPU-seconds) thrown away per eviction, by workload.",
    ["workload"],
    buckets=WORK_LOST_BUCKETS,
)
ERRORS = Counter("eru_errors_total", "Errors by kind (invalid_input, insufficient_resource, internal …).", ["code"])


def render(registry: CollectorRegistry = REGISTRY) -> tuple[bytes, str]:
    """The registry in the Prometheus text format, with its content type."""
    return _generate_latest(registry), CONTENT_TYPE_LATEST
