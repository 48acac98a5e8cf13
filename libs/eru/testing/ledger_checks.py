"""Checks of the ledger for tests: the allocation invariant (docs/reliability.md)."""

from __future__ import annotations

import json
from typing import Any

import asyncpg


async def usage_problems(pool: asyncpg.Pool) -> list[str]:
    """Nodes whose usage is not the sum of their live containers' allocations, or exceeds a core's pieces (the
    allocation invariant, docs/reliability.md)."""
    problems = []
    for node in await pool.fetch("SELECT * FROM nodes"):
        rows = await pool.fetch(
            "SELECT allocation FROM containers WHERE node = $1 AND state NOT IN ('removed', 'failed', 'lost') "
            "AND replaces IS NULL",
            node["name"],
        )
        cpu: dict[str, int] = {}
        memory = 0
        for row in rows:
            allocation: dict[str, Any] = json.loads(row["allocation"])
            for core, pieces in allocation["cpu_map"].items():
                cpu[core] = cpu.get(core, 0) + pieces
            memory += allocation["memory"]
        used = {k: int(v) for k, v in json.loads(node["used_cpu_map"]).items()}
        capacity = json.loads(node["cpu_map"])
        if used != cpu or node["used_memory"] != memory:
            problems.append(f"{node['name']}: usage {used}/{node['used_memory']} != containers {cpu}/{memory}")
        problems += [f"{node['name']}: core {c} at {p} > {capacity[c]}" for c, p in used.items() if p > capacity[c]]
    return problems
