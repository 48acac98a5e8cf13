"""A node's sliding window of CPU figures with running sums: O(1) amortised work per sample.

Each sample is reduced to four integers in micro-cores (node CPU used, batch CPU used, batch CPU request, batch CPU
allowed); the window keeps them in time order with their sums, so the window averages are exact integer ratios and
never drift (no float subtraction). Robustness rules, all deterministic:

* duplicate (a sample time already in the window): ignored, the first one counts;
* out of order but still inside the window: inserted at its place (a rare O(w) insert, counted in `late`);
* older than the window behind the newest sample (stale on arrival): dropped (counted in `dropped`);
* gaps are simply missing samples: the coverage check (`WindowStats.covered`) decides whether the window counts.
"""

from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass
from typing import Any

MICRO = 1_000_000


def micro(cores: float) -> int:
    """Cores → integer micro-cores (exact enough for CPU accounting, exact to sum)."""
    return round(cores * MICRO)


def cores(micro_cores: int) -> float:
    """Micro-cores → cores, for answers and logs."""
    return micro_cores / MICRO


@dataclass(frozen=True, slots=True)
class WindowPoint:
    """One sample's figures in micro-cores; `payload` keeps the raw sample so a decision can record its input."""

    time: float
    node_cpu: int
    batch_used: int
    batch_request: int
    batch_allowed: int
    payload: Any = None


@dataclass(frozen=True, slots=True)
class WindowStats:
    """Sums over the samples with `now - window_seconds < time <= now`."""

    count: int
    expected: float
    node_cpu: int
    batch_used: int
    batch_request: int
    batch_allowed: int

    @property
    def covered(self) -> bool:
        """The window holds at least a third of the samples the metrics interval promises (docs/colocation.md)."""
        return self.count > 0 and self.count * 3 >= self.expected - 1e-9


class SlidingWindow:
    """Samples of the last `window_seconds`, in time order, with running sums."""

    __slots__ = (
        "_points",
        "_sum_allowed",
        "_sum_node",
        "_sum_request",
        "_sum_used",
        "_times",
        "dropped",
        "duplicates",
        "interval_seconds",
        "late",
        "window_seconds",
    )

    def __init__(self, window_seconds: float, interval_seconds: float) -> None:
        self.window_seconds = window_seconds
        self.interval_seconds = interval_seconds
        self._points: deque[WindowPoint] = deque()
        self._times: set[float] = set()
        self._sum_node = self._sum_used = self._sum_request = self._sum_allowed = 0
        self.duplicates = self.late = self.dropped = 0

    def __len__(self) -> int:
        return len(self._points)

    @property
    def newest(self) -> WindowPoint | None:
        """The sample with the latest time, if any."""
        return self._points[-1] if self._points else None

    def points(self) -> list[WindowPoint]:
        """The samples in time order."""
        return list(self._points)

    def add(self, point: WindowPoint) -> bool:
        """Take a sample; False when it was a duplicate or too old to ever count."""
        if point.time in self._times:
            self.duplicates += 1
            return False
        newest = self._points[-1].time if self._points else None
        if newest is not None and point.time <= newest - self.window_seconds:
            self.dropped += 1
            return False
        if newest is None or point.time > newest:
            self._points.append(point)
        else:
            self.late += 1
            times = [p.time for p in self._points]
            self._points.insert(bisect.bisect_left(times, point.time), point)
        self._times.add(point.time)
        self._sum_node += point.node_cpu
        self._sum_used += point.batch_used
        self._sum_request += point.batch_request
        self._sum_allowed += point.batch_allowed
        self._expire(self._points[-1].time)
        return True

    def _expire(self, now: float) -> None:
        horizon = now - self.window_seconds
        points = self._points
        while points and points[0].time <= horizon:
            gone = points.popleft()
            self._times.discard(gone.time)
            self._sum_node -= gone.node_cpu
            self._sum_used -= gone.batch_used
            self._sum_request -= gone.batch_request
            self._sum_allowed -= gone.batch_allowed

    def stats(self, now: float) -> WindowStats:
        """The window's sums at `now` (samples at or before `now - window_seconds` leave the window for good)."""
        self._expire(now)
        return WindowStats(
            count=len(self._points),
            expected=self.window_seconds / self.interval_seconds,
            node_cpu=self._sum_node,
            batch_used=self._sum_used,
            batch_request=self._sum_request,
            batch_allowed=self._sum_allowed,
        )
