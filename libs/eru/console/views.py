"""What the console's pages show, computed from the allocator's rows and the bus's messages (pure; docs/console.md).

The browser only draws: a node card already says which container holds which piece of which core, where the
watermark bands are and how much is used; an eviction already carries its satisfaction rates and window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from eru.planning.resources import id_sort_key

WATERMARK_KEYS = ("cpu_forbid", "cpu_suppress", "cpu_evict", "memory_forbid", "memory_evict")
GONE = ("removed", "failed", "lost")  # lost: the node no longer ran it (docs/operations.md)


def core_map(
    cpu_map: Mapping[str, int], containers: Iterable[Mapping[str, Any]], share_base: int
) -> list[dict[str, Any]]:
    """Per core of the node (in core order): its pieces, who holds them (`holders`: container, pieces, whole or
    fragment) and what is free. Containers without a cpuset (memory-prime) hold no core."""
    holders: dict[str, list[dict[str, Any]]] = {core: [] for core in cpu_map}
    for container in containers:
        allocation = container.get("allocation") or {}
        for core, pieces in (allocation.get("cpu_map") or {}).items():
            holders.setdefault(str(core), []).append(
                {
                    "id": container["id"],
                    "workload": container.get("workload", ""),
                    "class": container.get("class", ""),
                    "pieces": int(pieces),
                    "whole": int(pieces) >= share_base,
                }
            )
    result = []
    for core in sorted(holders, key=id_sort_key(holders)):
        capacity = int(cpu_map.get(core, 0))
        taken = sum(h["pieces"] for h in holders[core])
        result.append({"core": core, "pieces": capacity, "holders": holders[core], "free": max(0, capacity - taken)})
    return result


def node_card(
    row: Mapping[str, Any], containers: Sequence[Mapping[str, Any]], usage: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One node as the Cluster page draws it. `row` is the allocator's node row, `containers` its live containers,
    `usage` the newest metrics sample summary (`cpu_percent`, `memory_percent`, `memory_used`, `time`) if any."""
    share_base = int(row.get("share_base") or 100)
    cpu_map = {str(k): int(v) for k, v in (row.get("cpu_map") or {}).items()}
    used_cpu = sum(int(v) for v in (row.get("used_cpu_map") or {}).values())
    live = [c for c in containers if c.get("state") not in GONE]
    conditions = dict(row.get("conditions") or {})
    watermarks = {k: int(v) for k, v in (conditions.get("watermarks") or {}).items() if k in WATERMARK_KEYS}
    current = dict(usage or {})
    for key in ("cpu_percent", "memory_percent"):
        if current.get(key) is None and conditions.get(key) is not None:
            current[key] = conditions[key]
    return {
        "name": row["name"],
        "pod": row.get("pod", ""),
        "state": row.get("state", "unknown"),
        "cordoned": bool(row.get("cordoned")),
        "heartbeat_at": row.get("heartbeat_at"),
        "share_base": share_base,
        "cores": core_map(cpu_map, live, share_base),
        "shared": [
            {
                "id": c["id"],
                "workload": c.get("workload", ""),
                "class": c.get("class", ""),
                "cpu": (c.get("resources") or {}).get("cpu_request") or (c.get("allocation") or {}).get("cpu_limit"),
            }
            for c in live
            if not (c.get("allocation") or {}).get("cpu_map")
        ],
        "cpu": {
            "capacity": sum(cpu_map.values()) / share_base,
            "reserved": used_cpu / share_base,
            # bound = cores held by cpusets (= reserved); requested = every live container's request, bound or not
            # (memory-prime CPU may oversell the node); None from an allocator that does not send it
            "bound": used_cpu / share_base,
            "requested": row.get("cpu_requested"),
        },
        "memory": {"capacity": int(row.get("memory") or 0), "reserved": int(row.get("used_memory") or 0)},
        "usage": current,
        "watermarks": watermarks,
        "condition": {
            "state": conditions.get("state", "unknown" if not conditions else "normal"),
            "forbid_cpu": bool(conditions.get("forbid_schedule_cpu")),
            "forbid_memory": bool(conditions.get("forbid_schedule_memory")),
            "batch_cpu_allowed": conditions.get("batch_cpu_allowed"),
            "batch_cpu_capacity": conditions.get("batch_cpu_capacity"),
            "batch_memory_capacity": conditions.get("batch_memory_capacity"),
            "evicting": list(conditions.get("evicting") or []),
        },
        "containers": len(live),
    }


def matches(row: Mapping[str, Any], query: str) -> bool:
    """The filter box: every word must appear in the node's name, pod or state (`cordoned`, `down`, `forbid`,
    `suppressed`, `evicting` match those states)."""
    conditions = row.get("conditions") or {}
    haystack = " ".join(
        [
            str(row.get("name", "")),
            str(row.get("pod", "")),
            str(row.get("state", "")),
            "cordoned" if row.get("cordoned") else "",
            str(conditions.get("state", "")),
        ]
    ).lower()
    return all(word in haystack for word in query.lower().split())


def page(items: Sequence[Any], offset: int, limit: int) -> tuple[list[Any], int]:
    """A page of `items` and the offset actually used (clamped to the last page)."""
    limit = max(1, min(limit, 500))
    offset = max(0, offset)
    if offset >= len(items):
        offset = max(0, (len(items) - 1) // limit * limit)
    return list(items[offset : offset + limit]), offset


def eviction_summary(body: Mapping[str, Any]) -> dict[str, Any]:
    """An `EvictionDecision` without its bulky input: victims, reason, the satisfaction rates and the window that
    triggered it (seconds, samples, first and last sample time), and the watermarks in force."""
    problem = body.get("input") or {}
    config = problem.get("config") or {}
    samples = problem.get("samples") or []
    numbers = body.get("numbers") or {}
    times = [float(s["time"]) for s in samples if isinstance(s, Mapping) and s.get("time") is not None]
    return {
        "decision_id": body.get("decision_id", ""),
        "node": body.get("node", ""),
        "time": body.get("time"),
        "kind": body.get("kind", ""),
        "reason": body.get("reason", ""),
        "victims": list(body.get("victims") or []),
        "batch_cpu_allowed": body.get("batch_cpu_allowed"),
        "newest": numbers.get("newest") or {},
        "cpu": numbers.get("cpu") or {},
        "memory": numbers.get("memory") or {},
        "window": {
            "seconds": config.get("window_seconds"),
            "samples": len(samples),
            "first": min(times) if times else None,
            "last": max(times) if times else None,
        },
        "thresholds": {
            key: config.get(key)
            for key in (*WATERMARK_KEYS, "satisfaction_lower", "satisfaction_upper", "batch_util_threshold")
            if key in config
        },
        "replica": body.get("replica", ""),
    }


def deploy_progress(row: Mapping[str, Any]) -> dict[str, Any]:
    """A deploy row of the `deploys` query with its progress: instances placed, running, failed, gone."""
    states = {str(k): int(v) for k, v in (row.get("states") or {}).items()}
    placed = sum(states.values())
    running = states.get("running", 0)
    failed = states.get("failed", 0)
    return {**row, "placed": placed, "running": running, "failed": failed, "pending": placed - running - failed}


def service_rows(
    replicas: Sequence[Mapping[str, Any]],
    expected: Sequence[str],
    restarts: Mapping[str, int] | None,
    metrics: Mapping[str, str] | None = None,
    consumers: Sequence[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per service, with the health rule of `eru status` (docs/operations.md): `missing` (no replica
    answers), `starting` (a replica is not ready), `degraded` (ready, but one of its durable consumers is not keeping
    up: `eru.bus.consumer_health`), else `ready`. Each replica with its /metrics URL when known; `restarts` when the
    stack reports them (None = not reported; per replica, else per service, as `eru status` counts)."""
    by_service: dict[str, list[Mapping[str, Any]]] = {}
    for replica in replicas:
        by_service.setdefault(str(replica.get("service", "")), []).append(replica)
    known = metrics or {}
    rows = []
    for service in sorted(set(expected) | set(by_service)):
        found = sorted(by_service.get(service, []), key=lambda r: str(r.get("replica", "")))
        ready = sum(1 for r in found if r.get("ready"))
        own = [dict(c) for c in consumers or [] if c.get("service") == service]
        health = "missing" if not found else ("ready" if ready == len(found) else "starting")
        if health == "ready" and any(c.get("state") == "degraded" for c in own):
            health = "degraded"
        shown = [
            {**r, "metrics_url": r.get("metrics") or known.get(str(r.get("replica"))) or known.get(service)}
            for r in found
        ]
        count = None
        if restarts is not None:
            count = sum(int(restarts.get(str(r.get("replica")), restarts.get(service, 0))) for r in found)
        rows.append(
            {
                "service": service,
                "health": health,
                "replicas": shown,
                "ready": ready,
                "restarts": count,
                "reasons": [f"{c.get('name')}: {reason}" for c in own for reason in c.get("reasons") or []],
            }
        )
    return rows
