"""Rolling replace (`eru workload replace NAME --image NEW`, docs/cli.md "Rolling replace"): pure rules, no I/O.

A workload's running instances are replaced wave by wave, `max_parallel` at a time, each by the existing replace
with rollback (the node agent starts the new container on the old one's allocation and keeps it only when it
passes its health command within `healthy_within`; otherwise the old one runs on). A wave succeeds when every new
container runs and is not unhealthy; a wave with a failure is rolled back — its new containers that did start are
replaced again by their previous image — and the rollout stops (Nomad's update stanza with `auto_revert`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

Verdict = Literal["pending", "ok", "failed"]
GONE = frozenset({"removed", "failed", "lost"})


def waves(container_ids: Sequence[str], max_parallel: int) -> list[list[str]]:
    """The instances in waves of at most `max_parallel`, in order (3 instances, 2 at a time: [[a, b], [c]])."""
    if max_parallel < 1:
        raise ValueError("max_parallel must be at least 1")
    return [list(container_ids[i : i + max_parallel]) for i in range(0, len(container_ids), max_parallel)]


def to_replace(rows: Iterable[Mapping[str, Any]], workload: str, image: str) -> list[Mapping[str, Any]]:
    """The workload's running instances not on `image` yet, by node then id (a rollout run again resumes)."""
    mine = [r for r in rows if r.get("workload") == workload and r.get("state") == "running" and not r.get("replaces")]
    return sorted((r for r in mine if r.get("image") != image), key=lambda r: (str(r.get("node")), str(r.get("id"))))


def verdict(row: Mapping[str, Any] | None) -> Verdict:
    """A new container's outcome from its ledger row: failed once it is gone (the agent rolled its replace back);
    once it runs on its own (its replace done) ok, or failed when its health check says unhealthy; else pending (a
    replacement still being checked by the agent waits for the agent's verdict)."""
    if row is None:
        return "pending"
    if row.get("state") in GONE:
        return "failed"
    if row.get("state") == "running" and not row.get("replaces"):
        return "failed" if row.get("health") == "unhealthy" else "ok"
    return "pending"


def images_running(rows: Iterable[Mapping[str, Any]], workload: str) -> dict[str, list[str]]:
    """Which live instances of the workload run which image: image → container ids."""
    running: dict[str, list[str]] = {}
    for row in rows:
        if row.get("workload") == workload and row.get("state") not in GONE and not row.get("replaces"):
            running.setdefault(str(row.get("image")), []).append(str(row.get("id")))
    return {image: sorted(ids) for image, ids in sorted(running.items())}
