"""How often a service's Python collects garbage (docs/performance.md "Garbage collection").

CPython's default runs a young collection every 700 net allocations and an older one every tenth of those. A
service allocates far more than that per request (a single-container deploy builds rows, records, events, models),
so the allocator spent about a fifth of its CPU in the collector (`bench/bench_allocator_batch.py`: 1.6 of 7.4 s),
mostly traversing objects that live as long as the process: modules, pydantic schemas, caches. `collect_less()`
moves everything startup built out of the collector's reach (`gc.freeze`) and collects the young generation every
10,000 allocations; reference cycles are still collected, a little later.
"""

from __future__ import annotations

import gc

THRESHOLDS = (10_000, 10, 10)


def collect_less() -> None:
    """Freeze what exists now (imports, settings) and collect less often; called once, before a service serves."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
