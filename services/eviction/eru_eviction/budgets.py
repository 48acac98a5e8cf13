"""Eviction budgets shared by every replica (docs/colocation.md "Eviction budgets"): a JetStream KV bucket.

One key per batch workload, `<pod>.<workload>`, holding the recent evictions `[[time, container_id], …]`. A replica
decides with its cached copy (refreshed every lease round and after each claim), then CLAIMS the evictions before
it sends a single evict command: read the key, count the evictions inside the window, append what still fits, and
write back with the revision it read (compare-and-set). Two replicas claiming at once cannot both succeed on the same
revision: the loser re-reads, sees the winner's evictions, and gets only what is left. A victim the claim refuses is
not evicted (the node stays suppressed); the decision event says so. A claim is idempotent per container id.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence

import structlog
from nats.js import JetStreamContext, api
from nats.js.errors import BadRequestError, KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from eru.bus.kv_keys import live_entries

log = structlog.get_logger()

BUCKET = "eru_eviction_budgets"
KEEP_SECONDS = 24 * 3600.0  # longest budget window honoured; entries older than this are dropped
ATTEMPTS = 16
# The bucket's byte cap (docs/operations.md "Retention"): one key per batch workload holding its last day of evictions,
# ~60 bytes each; 64 MiB holds a million evictions a day. At the cap a claim's write is refused: nothing is evicted.
MAX_BYTES = 64 * 1024 * 1024


def budget_key(pod: str | None, workload: str) -> str:
    """The KV key of a workload's budget (`_` for nodes that report no pod)."""
    return f"{pod or '_'}.{workload}"


def _parse(raw: bytes | None) -> list[tuple[float, str]]:
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        return []
    items = []
    for item in value.get("evictions", []) if isinstance(value, dict) else []:
        shaped = isinstance(item, list) and len(item) == 2 and isinstance(item[1], str)
        if shaped and isinstance(item[0], int | float) and math.isfinite(item[0]):
            items.append((float(item[0]), item[1]))
    return items


class BudgetBook:
    """The replica's view of every workload's recent evictions, and the compare-and-set claim."""

    def __init__(self, js: JetStreamContext, keep_seconds: float = KEEP_SECONDS) -> None:
        self.js = js
        self.keep_seconds = keep_seconds
        self._kv: KeyValue | None = None
        self.entries: dict[str, list[tuple[float, str]]] = {}

    async def start(self) -> None:
        """Create (or open) the bucket and read it once; a bucket made without the byte cap gets it in place."""
        config = api.KeyValueConfig(
            bucket=BUCKET, history=1, ttl=self.keep_seconds, storage=api.StorageType.FILE, max_bytes=MAX_BYTES
        )
        try:
            self._kv = await self.js.create_key_value(config=config)
        except BadRequestError:
            self._kv = await self.js.key_value(BUCKET)
            stream = (await self.js.stream_info(f"KV_{BUCKET}")).config
            if stream.max_bytes != MAX_BYTES:
                await self.js.update_stream(dataclasses.replace(stream, max_bytes=MAX_BYTES))
        await self.refresh()

    @property
    def kv(self) -> KeyValue:
        """The bucket (after `start`)."""
        if self._kv is None:
            raise RuntimeError("BudgetBook.start() was not awaited")
        return self._kv

    async def refresh(self) -> None:
        """Re-read every workload's evictions (other replicas' claims included): listed by the server in one answer
        (`eru.bus.kv_keys`: nats-py's `kv.keys()` can end early and would drop workloads from the copy)."""
        entries = await live_entries(self.js, self.kv, BUCKET)
        self.entries = {key: _parse(entry.value) for key, entry in entries.items()}

    def history(self, pod: str | None) -> dict[str, list[float]]:
        """workload → eviction times, for the workloads of `pod` (the tracker's budget input)."""
        prefix = f"{pod or '_'}."
        return {
            key[len(prefix) :]: [t for t, _ in items] for key, items in self.entries.items() if key.startswith(prefix)
        }

    async def claim(
        self, pod: str | None, workload: str, allowed: int, window: float, ids: Sequence[str], now: float
    ) -> list[str]:
        """The ids of `ids` the budget admits at `now` (allowed per `window`), recorded for every replica."""
        key = budget_key(pod, workload)
        for _ in range(ATTEMPTS):
            revision: int | None = None
            try:
                entry = await self.kv.get(key)
                revision, items = entry.revision, _parse(entry.value)
            except KeyNotFoundError:
                items = []
            items = [(t, cid) for t, cid in items if t > now - self.keep_seconds]
            known = {cid for _, cid in items}
            used = sum(1 for t, _ in items if now - window < t <= now)
            fresh = [cid for cid in ids if cid not in known]
            taken = fresh[: max(0, allowed - used)]
            items += [(now, cid) for cid in taken]
            payload = json.dumps({"evictions": [[t, cid] for t, cid in items]}).encode()
            try:
                if revision is None:
                    await self.kv.create(key, payload)
                else:
                    await self.kv.update(key, payload, last=revision)
            except KeyWrongLastSequenceError:
                continue  # another replica claimed in between: read again
            self.entries[key] = items
            return [cid for cid in ids if cid in known or cid in taken]
        log.warning("eviction.budget.contended", key=key)
        return []  # could not agree with the others: evict nobody rather than overrun the budget
