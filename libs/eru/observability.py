"""`eru up --observability DIR`: a Prometheus scrape configuration and a Grafana dashboard for the stack's replicas.

Every replica under `eru up` serves `/metrics` on its own loopback port (stack.json `metrics`); this writes
`prometheus.yml` (one static target per replica, labelled with its service and process) and
`grafana-dashboard.json` (panels over the metrics of `eru.telemetry`). See docs/operations.md.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from eru.stack.info import StackInfo

SCRAPE_INTERVAL = "5s"
DATASOURCE = "${DS_PROMETHEUS}"

# (title, PromQL, unit) per panel; rates over 1m so that a 5 s scrape shows movement within a minute
PANELS: tuple[tuple[str, str, str], ...] = (
    (
        "Messages handled per second, by consumer and outcome",
        "sum by (consumer, outcome) (rate(eru_messages_total[1m]))",
        "ops",
    ),
    ("Consumer lag (messages waiting)", "sum by (consumer) (eru_consumer_pending_messages)", "short"),
    (
        "Handler latency p99",
        "histogram_quantile(0.99, sum by (le, consumer) (rate(eru_message_handle_seconds_bucket[1m])))",
        "s",
    ),
    (
        "Requests per second, by subject and outcome",
        "sum by (subject, outcome) (rate(eru_requests_total[1m]))",
        "reqps",
    ),
    (
        "Request latency p99",
        "histogram_quantile(0.99, sum by (le, subject) (rate(eru_request_seconds_bucket[1m])))",
        "s",
    ),
    ("Containers allocated per second, by pod", "sum by (pod) (rate(eru_allocations_total[1m]))", "ops"),
    ("Evictions per second, by reason", "sum by (reason) (rate(eru_evictions_total[1m]))", "ops"),
    ("Errors per second, by code", "sum by (code) (rate(eru_errors_total[1m]))", "ops"),
    ("Messages in flight", "sum by (consumer) (eru_messages_in_flight)", "short"),
    ("Replicas up", 'sum by (service) (up{job="eru"})', "short"),
)


def service_of(process: str) -> str:
    """The service a stack process runs (`node-agent-sim` → `node-agent`, `allocator` → `allocator`)."""
    return "node-agent" if process.startswith("node-agent") else process


def scrape_config(info: StackInfo) -> str:
    """`prometheus.yml`: one job `eru`, one static target per replica with `service` and `process` labels."""
    lines = ["global:", f"  scrape_interval: {SCRAPE_INTERVAL}", "scrape_configs:", "  - job_name: eru"]
    lines += ["    metrics_path: /metrics", "    static_configs:"]
    for process, url in sorted(info.metrics.items()):
        target = urlsplit(url).netloc
        lines += [f'      - targets: ["{target}"]', "        labels:"]
        lines += [f"          service: {service_of(process)}", f"          process: {process}"]
    return "\n".join(lines) + "\n"


def dashboard() -> dict[str, Any]:
    """A Grafana dashboard (schema 39) with one time-series panel per entry of `PANELS`, two per row."""
    panels = []
    for index, (title, expression, unit) in enumerate(PANELS):
        panels.append(
            {
                "id": index + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": DATASOURCE},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "options": {"legend": {"displayMode": "table", "placement": "bottom", "showLegend": True}},
                "targets": [
                    {"refId": "A", "expr": expression, "datasource": {"type": "prometheus", "uid": DATASOURCE}}
                ],
            }
        )
    return {
        "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource", "pluginId": "prometheus"}],
        "title": "eru",
        "uid": "eru-overview",
        "schemaVersion": 39,
        "time": {"from": "now-15m", "to": "now"},
        "refresh": "5s",
        "tags": ["eru"],
        "panels": panels,
    }


def write_observability(directory: Path, info: StackInfo) -> list[Path]:
    """Write `prometheus.yml` and `grafana-dashboard.json` into `directory`; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    scrape = directory / "prometheus.yml"
    scrape.write_text(scrape_config(info))
    board = directory / "grafana-dashboard.json"
    board.write_text(json.dumps(dashboard(), indent=2) + "\n")
    return [scrape, board]
