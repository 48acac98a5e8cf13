"""How often a service's Python collects garbage (docs/performance.md "Garbage collection").

CPython's default runs a young collection every 700 net allocations and an older one every tenth of those. A
service allocates far more than that per request (a single-container deploy builds rows, records, events, models),
so the allocator spent about a fifth of its CPU in the collector (`bench/bench_allocator_batch.py`: 1.6 of 7.4 s),
mostly traversing objects that live as long as the process: modules, pydantic schemas, caches. `collect_less()`
moves everything startup built out of the collector's reach (`gc.freeze`) and collects the young generation every
10,000 allocations; reference cycles are still collected, a little later.

The service runner then sets the young threshold to `ERU_GC_THRESHOLD` (`tune`, default 50,000; 0 leaves the
10,000 above) and, once the service is ready, freezes what it built while starting (`freeze_started`): in a
50 deploys/s soak CPython's defaults gave a *full* collection every ~7 s in the sim node agent (100 → 500 ms,
growing with its heap, freeing nothing) and every ~4 s in the allocator (160–330 ms), a pause for every request in
flight (docs/performance.md "Garbage collection").
"""

from __future__ import annotations

import gc

THRESHOLDS = (10_000, 10, 10)


def collect_less() -> None:
    """Freeze what exists now (imports, settings) and collect less often; called once, before a service serves."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)


DEFAULT_THRESHOLD = 50_000


def tune(threshold: int) -> tuple[int, int, int]:
    """Set the young-generation threshold (0: leave it as it is); the thresholds now in force."""
    if threshold > 0:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(threshold, older, oldest)
    return gc.get_threshold()


def freeze_started() -> int:
    """Collect once, then move every object alive now to the permanent generation; how many were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
