"""Reservations of prod/mid containers and a node's batch capacity (docs/colocation.md, Borg's resource reclamation).

A reservation estimates what a container will really use. It equals the request during the start-up period; after
that it decays (exponentially, with a half-life) toward the recent peak usage plus a safety margin, rises at once
when usage exceeds it, and never exceeds the request. The recent peak is a sliding-window maximum over a monotonic
deque (O(1) amortised per sample). Units are whatever the caller uses (micro-cores, bytes), as integers.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from eru.colocation.config import ColocationConfig


class Reservation:
    """One container's reservation for one resource; feed it samples in time order with `observe`."""

    __slots__ = ("_peaks", "first_seen", "last_time", "request", "value")

    def __init__(self, request: int, first_seen: float) -> None:
        self.request = request
        self.first_seen = first_seen
        self.last_time = first_seen
        self.value = request
        self._peaks: deque[tuple[float, int]] = deque()

    def observe(self, time: float, usage: int, config: ColocationConfig, request: int | None = None) -> int:
        """Take one usage sample and return the new reservation; samples older than the last one are ignored."""
        if request is not None and request != self.request:
            self.request = request
            self.value = min(self.value, request)
        if time < self.last_time:
            return self.value
        while self._peaks and self._peaks[-1][1] <= usage:
            self._peaks.pop()
        self._peaks.append((time, usage))
        horizon = time - config.reservation_peak_window_seconds
        while self._peaks[0][0] <= horizon:
            self._peaks.popleft()
        elapsed = time - self.last_time
        self.last_time = time
        if time - self.first_seen < config.reservation_startup_seconds:
            self.value = self.request
            return self.value
        margin = self.request * config.reservation_margin_percent // 100
        target = min(self.request, self._peaks[0][1] + margin)
        if usage + margin > self.value:
            self.value = min(self.request, usage + margin)
        elif self.value > target:
            decay = 0.5 ** (elapsed / config.reservation_half_life_seconds)
            self.value = max(target, target + int((self.value - target) * decay))
        return self.value


@dataclass(frozen=True, slots=True)
class BatchCapacity:
    """What batch may be placed against on one node (never below zero)."""

    cpu: int
    memory: int


def batch_capacity(
    cpu_capacity: int,
    memory_capacity: int,
    reserved_cpu: int,
    reserved_memory: int,
    batch_cpu_requests: int,
    batch_memory_requests: int,
) -> BatchCapacity:
    """Capacity minus the prod/mid reservations minus the batch containers' requests (docs/colocation.md)."""
    return BatchCapacity(
        cpu=max(0, cpu_capacity - reserved_cpu - batch_cpu_requests),
        memory=max(0, memory_capacity - reserved_memory - batch_memory_requests),
    )
