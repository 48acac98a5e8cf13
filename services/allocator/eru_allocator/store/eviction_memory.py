"""Memory of evictions in batch placement (docs/colocation.md "Memory of evictions"): the allocator's shell.

For a batch request the pod's recent evictions (table `evictions`, kept by `keep_count.py`) and PostgreSQL's `now` are
read once per transaction into the snapshot (`EvictionHistory`); the pure decision (`eru.planning.decide`) leaves
the nodes the workload avoids out of the placement, records the history, `now` and the back-off settings (so
`eru replay` re-runs the avoidance) and answers, per node, why (`"avoided": {"n2": "evicted web-batch 4 min ago,
back-off 10 min"}`).
"""

from __future__ import annotations

from eru.colocation.backoff import Eviction, KeepConfig
from eru.planning.snapshot import EvictionHistory
from eru.store.transaction import Connection

RECENT_SQL = """
SELECT workload, lineage, node, at, extract(epoch FROM now())::float8 AS now FROM evictions
 WHERE pod = $1 AND at > extract(epoch FROM now()) - $2
 ORDER BY at
"""
NOW_SQL = "SELECT extract(epoch FROM now())::float8"


async def load(conn: Connection, pod: str, config: KeepConfig) -> EvictionHistory:
    """The pod's evictions within the decay, and the transaction's `now`."""
    rows = await conn.fetch(RECENT_SQL, pod, config.avoid_decay_seconds)
    now = float(rows[0]["now"]) if rows else float(await conn.fetchval(NOW_SQL))
    history = tuple(Eviction(r["workload"], r["lineage"], r["node"], float(r["at"])) for r in rows)
    return EvictionHistory(now, history, config)
