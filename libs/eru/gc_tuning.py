"""CPython's cyclic garbage collector set for long-running services (docs/performance.md "Garbage collection pauses").

With CPython's defaults (thresholds 700, 10, 10) a service handling 50 deploys/s runs a young collection every
~700 net allocations, so everything that lives a few milliseconds (a message in flight, a pending task) is promoted
to the old generations; every time those promotions reach a quarter of the old generation, a full collection
traverses the whole heap. Measured in a 50/s soak (a timer around every event-loop callback and `gc.callbacks`):
a full collection every ~7 s in the sim node agent (100 → 500 ms, growing with its heap, freeing nothing) and every
~4 s in the allocator (160–200 ms): every request in flight waits that long, several nodes at once.

Two changes: (1) a young-generation threshold of `ERU_GC_THRESHOLD` (50,000) allocations, so short-lived objects die
(by reference counting) before a collection ever sees them and far fewer are promoted, so full collections become
rare; a young collection stays a few milliseconds. (2) once the service is ready, everything allocated while it
started (modules, settings, schemas, the loaded state) is moved to the permanent generation (`gc.freeze`), so that a
full collection no longer traverses it. `ERU_GC_THRESHOLD=0` keeps CPython's defaults.
"""

from __future__ import annotations

import gc

DEFAULT_THRESHOLD = 50_000


def tune(threshold: int) -> tuple[int, int, int]:
    """Set the young-generation threshold (0: leave CPython's defaults); the thresholds now in force."""
    if threshold > 0:
        _, older, oldest = gc.get_threshold()
        gc.set_threshold(threshold, older, oldest)
    return gc.get_threshold()


def freeze_started() -> int:
    """Collect once, then move every object alive now to the permanent generation; how many were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
