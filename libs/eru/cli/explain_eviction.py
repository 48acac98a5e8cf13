"""`eru explain <eviction decision id>`: find the recorded eviction event on the bus and print its explanation
(`eru.decision_view.explain_eviction_event`, the same the web console shows; docs/colocation.md "Every eviction
explained")."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from eru.cli.bus_client import console
from eru.cli.output import document

if TYPE_CHECKING:
    from nats.aio.client import Client

EVICTION_ID = re.compile(r"(?P<node>.+)-(?P<ms>\d+)-(?P<kind>evict|refuse|suppress|unsuppress)")
"""An eviction decision id: `<node>-<milliseconds>-<kind>` (`eru_eviction`, the tracker's decision ids)."""


async def eviction_event(nc: Client, decision_id: str) -> Mapping[str, Any] | None:
    """The body of the eviction event recorded under `decision_id` (ERU_EVENTS, `eru.eviction.<node>`), or None."""
    from eru.bus.history import read_stream
    from eru.bus.streams import EVENTS

    match = EVICTION_ID.fullmatch(decision_id)
    if match is None:
        return None
    since = datetime.fromtimestamp(int(match["ms"]) / 1000, UTC) - timedelta(seconds=60)
    subject = f"eru.eviction.{match['node']}"
    async for message in read_stream(nc.jetstream(), EVENTS, subject_filter=subject, since=since):
        body = message.body
        if isinstance(body, Mapping) and body.get("decision_id") == decision_id:
            return body
    return None


def eviction_document(decision_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The `eru.cli/explain` document of an eviction decision (`kind: evict`)."""
    from eru.decision_view import explain_eviction_event

    return document("explain", decision_id=decision_id, kind="evict", explained=True, **explain_eviction_event(body))


def _pct(value: Any) -> str:
    return "-" if value is None else f"{float(value):g}%"


def print_eviction(doc: Mapping[str, Any]) -> None:
    """The text form: the node's window and watermarks, then one row per batch container."""
    from rich.table import Table

    window = doc["window"]
    newest = window.get("newest") or {}
    marks = window["watermarks"]
    backoff = window["backoff"]
    console.print(
        f"decision {doc['decision_id']} ({doc['event_kind']}) on node {window['node']}: {doc['action']}"
        + ("" if doc.get("same", True) else " [red](the recorded victims differ from the recomputed ones)[/]"),
        highlight=False,
    )
    console.print(
        f"window {window['seconds']:g} s, {window['samples']} samples (expected {window['expected']:g}"
        f"{', covered' if window['covered'] else ', not covered'}); "
        f"node CPU newest {_pct(newest.get('node_cpu_percent'))}"
        f" window {_pct(window['window_node_cpu_percent'])}, memory {_pct(newest.get('node_memory_percent'))}; "
        f"satisfaction newest {_pct(newest.get('satisfaction_percent'))} window "
        f"{_pct(window['window_satisfaction_percent'])}; batch utilisation newest "
        f"{_pct(newest.get('batch_util_percent'))} window {_pct(window['window_batch_util_percent'])}",
        highlight=False,
    )
    console.print(
        "watermarks: "
        + ", ".join(f"{name} {value}" for name, value in marks.items())
        + f"; cool-down left: cpu {backoff['cpu_cooldown_left_seconds']:g} s, "
        f"memory {backoff['memory_cooldown_left_seconds']:g} s",
        highlight=False,
    )
    table = Table(title="batch containers considered (CPU victim order)")
    for column in ("container", "workload", "priority", "satisfaction", "work lost", "budget left", "chosen", "why"):
        table.add_column(column, overflow="fold")
    for row in doc["containers"]:
        table.add_row(
            row["id"],
            row["workload"] or "-",
            str(row["priority"]),
            _pct(row["satisfaction_percent"]),
            f"{row['work_lost']:g} CPU-s",
            "-" if row["budget_left"] is None else str(row["budget_left"]),
            "yes" if row["chosen"] else "no",
            row["why"],
        )
    console.print(table)
