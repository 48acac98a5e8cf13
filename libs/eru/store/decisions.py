"""Reading recorded decisions back whole (docs/replay.md): a compact deploy record names the nodes of its batch's
snapshot (`eru.planning.decision_record`); these functions put them back from `decision_snapshots`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeAlias

import asyncpg

from eru.errors import InvalidInput
from eru.planning.decision_record import MAX_CHAIN, base_of, expand, merged, snapshot_of
from eru.store.retention import expired_at
from eru.store.transaction import Connection

Reader: TypeAlias = Connection | asyncpg.Pool
SNAPSHOT_SQL = "SELECT nodes FROM decision_snapshots WHERE id = $1"


async def full_input(conn: Reader, problem: Mapping[str, Any]) -> dict[str, Any]:
    """The decision's input as a full `eru plan` problem (a full record as it is); `InvalidInput` naming
    `input.snapshot` when its snapshot is not recorded (retention dropped it: the decision is past retention too)."""
    ref = snapshot_of(problem)
    if ref is None:
        return dict(problem)
    nodes = await _snapshot(conn, ref)
    if nodes is not None and base_of(nodes) is not None:  # a change of an earlier row (`SnapshotChain`)
        rows = [nodes]
        while (base := base_of(rows[-1])) is not None and len(rows) <= MAX_CHAIN:
            row = await _snapshot(conn, base)
            if row is None:
                break
            rows.append(row)
        nodes = merged(rows)
    return expand(problem, nodes)


async def _snapshot(conn: Reader, ref: str) -> dict[str, Any] | None:
    """A stored snapshot row (name → node), None when not recorded; `InvalidInput` when retention dropped it."""
    text = await conn.fetchval(SNAPSHOT_SQL, ref)
    if text is None:
        gone = await expired_at(conn, "decision_snapshots", ref)
        if gone is not None:
            reason = f"snapshot {ref!r} expired at {gone[0].isoformat()} (retention; the decision with it)"
            raise InvalidInput("input.snapshot", reason)
        return None
    nodes: dict[str, Any] = json.loads(text)
    return nodes


async def decision_input(conn: Reader, decision_id: str) -> dict[str, Any] | None:
    """The full input of decision `decision_id`, or None when no such decision is recorded."""
    text = await conn.fetchval("SELECT input FROM decisions WHERE id = $1", decision_id)
    if text is None:
        return None
    return await full_input(conn, json.loads(text))


__all__ = ["SNAPSHOT_SQL", "Reader", "decision_input", "full_input"]
