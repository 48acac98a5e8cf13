"""`eru_map_add` (migration 0240) charges a node's usage map by changing only the delta's keys; it must give exactly
the map migration 0002's body gave (kept as `eru_map_add_all`): numeric sums, keys not above 0 dropped, on random
maps charged and released, including bases holding a key not above 0 (which take the old body)."""

from __future__ import annotations

import json
import random

import asyncpg

COMPARE = """
SELECT b, d, f, eru_map_add(b, d, f) AS fast, eru_map_add_all(b, d, f) AS whole
  FROM unnest($1::jsonb[], $2::jsonb[], $3::bigint[]) AS u (b, d, f)
"""


def _map(rng: random.Random, low: int) -> dict[str, int | float]:
    keys = rng.sample(range(40), rng.randint(0, 8))
    return {str(k): rng.choice([rng.randint(low, 150), rng.randint(low, 150) / 4]) for k in keys}


async def test_charging_by_the_delta_gives_the_whole_maps_result(store_pool: asyncpg.Pool) -> None:
    rng = random.Random(20261208)
    bases, deltas, factors = [], [], []
    for index in range(5000):
        bases.append(json.dumps(_map(rng, -5 if index % 10 == 0 else 1)))  # a tenth with keys not above 0
        deltas.append(json.dumps(_map(rng, -150)))
        factors.append(rng.choice([1, -1, 2]))
    rows = await store_pool.fetch(COMPARE, bases, deltas, factors)
    differ = [(r["b"], r["d"], r["f"], r["fast"], r["whole"]) for r in rows if r["fast"] != r["whole"]]
    assert differ == []
    assert len(rows) == 5000


async def test_a_charge_and_its_release_leave_the_map_as_it_was(store_pool: asyncpg.Pool) -> None:
    base, delta = json.dumps({"0": 100, "1": 25.5}), json.dumps({"1": 10, "7": 30})
    charged = await store_pool.fetchval("SELECT eru_map_add($1::jsonb, $2::jsonb, 1)", base, delta)
    assert json.loads(charged) == {"0": 100, "1": 35.5, "7": 30}
    released = await store_pool.fetchval("SELECT eru_map_add($1::jsonb, $2::jsonb, -1)", charged, delta)
    assert json.loads(released) == {"0": 100, "1": 25.5}
