"""The waits capability (`eru.store.waits`) in memory: `MemoryWaits`, the store's part (mixed into `InMemoryStore`,
eru.testing.memory_store), and `MemoryWaitSession`, a pod session's (mixed into `MemoryPodSession`). The same answers
as PostgreSQL's `eru_allocator.store.waiting` (the contract suite, tests/integration/store/test_waits_contract.py,
runs both).

A wait's place in the queue and its deadline are noted when its batch is applied (`note_waits`: the store's `now`
plus `wait_seconds`); a wait appended to `waits` by hand gets them when first read. A session's changes to waits are
applied when its block ends normally and dropped when it raises, as a transaction's are; the session reads its own
changes.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from eru.fairness.drf import Tenant
from eru.store.protocol import DeployRow, WaitRow
from eru.store.waits import AdmissionQueue, PendingWait, WaitSession


@dataclass
class WaitChanges:
    """A session's changes to waits, applied when it ends: reasons by deploy id, and the waits that end (deploy id →
    the deploy's new status, result as JSON text, and whether that result is merged into the old one)."""

    reasons: dict[str, str] = field(default_factory=dict)
    ended: dict[str, tuple[str, str, bool]] = field(default_factory=dict)


class MemoryWaits:
    """`AdmissionQueue` over the store's `waits`, and what sessions' wait changes are applied to."""

    now: float
    waits: list[WaitRow]
    deploys: dict[str, DeployRow]
    tenants: dict[str, Tenant]
    wait_times: dict[str, tuple[int, float]]
    """deploy id → (arrival, deadline in the store's time)."""
    wait_arrivals: int
    """The last arrival given."""
    wake_listeners: list[Callable[[str], None]]

    def note_waits(self, rows: Iterable[WaitRow]) -> None:
        """Queue `rows`: each arrives now, its deadline `wait_seconds` ahead."""
        for row in rows:
            self.waits.append(row)
            self.wait_time(row)

    def wait_time(self, row: WaitRow) -> tuple[int, float]:
        """The wait's (arrival, deadline), noted now when not yet."""
        if row.deploy_id not in self.wait_times:
            self.wait_arrivals += 1
            self.wait_times[row.deploy_id] = (self.wait_arrivals, self.now + row.wait_seconds)
        return self.wait_times[row.deploy_id]

    def apply_wait_changes(self, changes: WaitChanges) -> None:
        """A session's changes, at its end: reasons noted, ended waits out of the queue and their deploys changed."""
        self.waits = [
            row._replace(reason=changes.reasons.get(row.deploy_id, row.reason))
            for row in self.waits
            if row.deploy_id not in changes.ended
        ]
        for deploy_id, (status, result, merge) in changes.ended.items():
            self.wait_times.pop(deploy_id, None)
            deploy = self.deploys.get(deploy_id)
            if deploy is None:
                continue
            if merge:
                merged = json.loads(deploy.result or "{}")
                merged.update(json.loads(result))
                result = json.dumps(merged)
            self.deploys[deploy_id] = deploy._replace(status=status, result=result)

    def wake_waiting(self, pods: Iterable[str]) -> None:
        """Call the `listen_admission` blocks' callbacks for each of `pods` (waits were submitted there)."""
        for pod in sorted(set(pods)):
            for wake in list(self.wake_listeners):
                wake(pod)

    async def waiting_pods(self) -> list[str]:
        """The pods with waiting requests, in name order."""
        return sorted({row.pod for row in self.waits})

    async def next_deadline(self) -> float | None:
        """Seconds until the earliest wait's deadline (negative when past), None when nothing waits."""
        deadlines = [self.wait_time(row)[1] for row in self.waits]
        return min(deadlines) - self.now if deadlines else None

    @asynccontextmanager
    async def listen_admission(self, wake: Callable[[str], None]) -> AsyncIterator[None]:
        """`wake(pod)` whenever a session submits waits to `pod`, while the block runs."""
        self.wake_listeners.append(wake)
        try:
            yield
        finally:
            self.wake_listeners.remove(wake)


class MemoryWaitSession:
    """`WaitSession` over a session's `store` and `pod`, its changes kept in `wait_changes` until the session ends."""

    pod: str
    wait_changes: WaitChanges

    def waits_store(self) -> MemoryWaits:
        """The store the session's waits live in."""
        raise NotImplementedError  # MemoryPodSession's

    async def pod_waits(self) -> list[PendingWait]:
        """The pod's waits in arrival order, as the session left them."""
        store, changes = self.waits_store(), self.wait_changes
        pending = []
        for row in store.waits:
            if row.pod != self.pod or row.deploy_id in changes.ended:
                continue
            arrival, deadline = store.wait_time(row)
            reason = changes.reasons.get(row.deploy_id, row.reason)
            pending.append(
                PendingWait(
                    row.deploy_id,
                    row.request_key,
                    row.tenant,
                    arrival,
                    row.request,
                    row.envelope,
                    reason,
                    deadline <= store.now,
                )
            )
        return sorted(pending, key=lambda wait: wait.arrival)

    async def fail_wait(self, deploy_id: str, result: str) -> None:
        """The deploy fails with `result` merged into its result and leaves the queue (at the session's end)."""
        self.wait_changes.ended[deploy_id] = ("failed", result, True)

    async def admit_wait(self, deploy_id: str, status: str, result: str) -> None:
        """The deploy takes `status` and `result` and leaves the queue (at the session's end)."""
        self.wait_changes.ended[deploy_id] = (status, result, False)

    async def set_wait_reason(self, deploy_id: str, reason: str) -> None:
        """Why the deploy still waits (a wait that ended or never was is left alone)."""
        changes = self.wait_changes
        if deploy_id not in changes.ended and any(row.deploy_id == deploy_id for row in self.waits_store().waits):
            changes.reasons[deploy_id] = reason

    async def tenants(self) -> dict[str, Tenant]:
        """Every tenant and group by name."""
        return dict(self.waits_store().tenants)


def _conforms(store: MemoryWaits, session: MemoryWaitSession) -> tuple[AdmissionQueue, WaitSession]:
    """Where mypy checks that the parts are an `AdmissionQueue` and a `WaitSession`."""
    return store, session
