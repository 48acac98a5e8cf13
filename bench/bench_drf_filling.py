"""Progressive filling speed (`eru plan` kind drf): the canonical tasks plus a weighted third tenant, scaled.

`python bench/bench_drf_filling.py` prints one JSON line per scale: tasks handed out and seconds.
"""

import json
import time

from eru.fairness.plan_kind import solve_drf

for scale in (100, 1000):  # pods of 900 and 9,000 cores
    problem = {
        "kind": "drf",
        "totals": {"cpu": 9 * scale, "memory": f"{18 * scale}GB"},
        "tenants": [
            {"name": "A", "demand": {"cpu": 1, "memory": "4GB"}},
            {"name": "B", "demand": {"cpu": 3, "memory": "1GB"}},
            {"name": "C", "demand": {"cpu": 1, "memory": "1GB"}, "weight": 2},
        ],
    }
    start = time.perf_counter()
    answer = solve_drf(problem)
    took = time.perf_counter() - start
    print(json.dumps({"scale": scale, "tasks": sum(answer["tasks"].values()), "seconds": round(took, 3)}))
