"""What a service did since its last summary line: counts and latencies of per-request work (docs/operations.md "Logs").

Per-request lines (`deploy.planned`, `deploy.finished`, …) are logged at debug; each is also counted here, and the
service runner logs one `service.summary` line at info every `ERU_LOG_SUMMARY_SECONDS` (60) with the counts, the
rates per second and the latency percentiles of the interval, then starts a new interval. At 50 deploys/s the
allocator wrote ~2.6 MB of info lines a minute (one `deploy.planned` and one `deploy.finished` per deploy, ~870 B);
with the summary it writes one line of ~1 KB a minute, whatever the rate.

`Activity` is plain bookkeeping with the clock passed in (`take(now)`), so a test drives it without waiting.
Latency percentiles are taken over the last `keep` samples of an interval per name (counts and the maximum are
exact): at 50/s and 60 s, 3,000 samples, all kept with the default 4,096.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

KEEP = 4096  # latency samples per name and interval (a ring: the newest are kept)


def _percentile(ordered: list[float], fraction: float) -> float:
    """Nearest-rank percentile of an ascending list (not empty)."""
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


class Activity:
    """Counts and latency samples by name since the last `take`."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._counts: Counter[str] = Counter()
        self._samples: dict[str, list[float]] = {}
        self._seen: Counter[str] = Counter()  # samples offered per name (ring position)
        self._maximum: dict[str, float] = {}
        self._since: float | None = None

    def count(self, name: str, n: int = 1, *, seconds: float | None = None) -> None:
        """Count `n` of `name`; with `seconds`, one latency sample of it (negative values, a clock skew, count as 0)."""
        self._counts[name] += n
        if seconds is None:
            return
        value = max(0.0, seconds)
        samples = self._samples.setdefault(name, [])
        position = self._seen[name]
        self._seen[name] += 1
        if len(samples) < self.keep:
            samples.append(value)
        else:
            samples[position % self.keep] = value
        self._maximum[name] = max(self._maximum.get(name, 0.0), value)

    def start(self, now: float) -> None:
        """Begin the first interval at `now` (a monotonic clock, seconds)."""
        if self._since is None:
            self._since = now

    def take(self, now: float) -> dict[str, Any] | None:
        """The interval ending at `now` as a summary (None if nothing was counted), and start the next one.

        `{"interval_s": 60.0, "counts": {"deploy.planned": 3000}, "per_s": {"deploy.planned": 50.0},
        "latency_ms": {"deploy.planned": {"p50": 21.0, "p99": 180.0, "max": 412.0, "n": 3000}}}`"""
        since = self._since if self._since is not None else now
        self._since = now
        if not self._counts:
            return None
        interval = max(now - since, 1e-9)
        counts = dict(sorted(self._counts.items()))
        latency: dict[str, dict[str, float]] = {}
        for name in sorted(self._samples):
            ordered = sorted(self._samples[name])
            latency[name] = {
                "p50": round(_percentile(ordered, 0.50) * 1000, 1),
                "p99": round(_percentile(ordered, 0.99) * 1000, 1),
                "max": round(self._maximum[name] * 1000, 1),
                "n": self._seen[name],
            }
        summary: dict[str, Any] = {
            "interval_s": round(interval, 1),
            "counts": counts,
            "per_s": {name: round(n / interval, 2) for name, n in counts.items()},
        }
        if latency:
            summary["latency_ms"] = latency
        self._counts.clear()
        self._samples.clear()
        self._seen.clear()
        self._maximum.clear()
        return summary


ACTIVITY = Activity()  # this process's; the service runner logs and resets it (eru.service)
