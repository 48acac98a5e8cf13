"""Room sized for the coming peak (docs/colocation.md "Room sized for the coming peak"), pure.

A node's batch room is what the latency-sensitive (prod + mid) usage leaves at its peak of the last
`room_horizon_seconds` — a horizon at least one load cycle long — not at the current trough:

    room = capacity − peak(LS usage over the horizon) − Σ batch requests on the node   (≥ 0)
    room = 0 when that peak reaches the evict watermark

Batch in the room may be suppressed when the peak comes back (suppression keeps the node under the suppress line and
the batch's work), but it is not evicted for CPU: that needs the node's window average at the evict watermark, which
latency-sensitive load below it cannot reach once batch is suppressed. The peak is a
sliding-window maximum over a monotonic deque: O(1) amortised per sample.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass


class PeakWindow:
    """The maximum of a series over the last `horizon_seconds` (samples fed in time order; older ones ignored)."""

    __slots__ = ("_peaks", "first", "horizon_seconds", "last")

    def __init__(self, horizon_seconds: float) -> None:
        self.horizon_seconds = horizon_seconds
        self._peaks: deque[tuple[float, int]] = deque()
        self.first: float | None = None
        self.last: float | None = None

    def add(self, time: float, value: int) -> None:
        """Take one sample."""
        if self.last is not None and time <= self.last:
            return
        if self.first is None:
            self.first = time
        self.last = time
        while self._peaks and self._peaks[-1][1] <= value:
            self._peaks.pop()
        self._peaks.append((time, value))
        horizon = time - self.horizon_seconds
        while len(self._peaks) > 1 and self._peaks[0][0] <= horizon:
            self._peaks.popleft()

    @property
    def peak(self) -> int:
        """The maximum over the horizon (0 with no samples)."""
        return self._peaks[0][1] if self._peaks else 0

    @property
    def covered_seconds(self) -> float:
        """How much of the horizon the samples span (less than the horizon while the node is new)."""
        if self.first is None or self.last is None:
            return 0.0
        return min(self.horizon_seconds, self.last - self.first)


@dataclass(frozen=True, slots=True)
class PeakRoom:
    """A node's batch room and what it was derived from (CPU in micro-cores)."""

    room: int
    peak: int
    horizon_seconds: float
    covered_seconds: float
    line: int


def peak_room(capacity: int, evict_percent: int, peak: int, batch_requests: int) -> int:
    """Batch room at the latency-sensitive peak: what the peak leaves of the node, less the batch already there; 0 when
    the peak reaches the evict watermark (batch placed there would be evicted when the load comes back)."""
    if peak * 100 >= evict_percent * capacity:
        return 0
    return max(0, capacity - peak - batch_requests)
