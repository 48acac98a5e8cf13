"""The waits capability of the allocator's store (docs/store.md "Capabilities"): the requests that wait for admission
(docs/fairness-and-scoring.md "Waiting for admission") as the admission pass (`eru_allocator/deploy/admission_pass.py`)
reads and ends them. Implemented by PostgreSQL (`eru_allocator.store.waiting`, mixed into `PgPodSession` and
`PgStore`) and in memory (`eru.testing.memory_waits`, mixed into `MemoryPodSession` and `InMemoryStore`); the
contract suite (tests/integration/store/test_waits_contract.py) runs the same cases against both.

Two parts: `WaitSession`, what a pod's session (under its lock, in its transaction) offers the pass over that pod;
`AdmissionQueue`, what the admission loop asks the store between passes (which pods have waits, the next deadline,
and a block in which the store calls back when a pass may admit something).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from eru.fairness.drf import Tenant


@dataclass(frozen=True, slots=True)
class PendingWait:
    """A waiting request as the admission pass reads it (`deploy_waits`): its deploy and request key, tenant, place in
    the queue (`arrival`, increasing), the request, its envelope's headers and the last reason it waited (JSON text:
    an object; `{}` before any), and whether its deadline has passed."""

    deploy_id: str
    request_key: str
    tenant: str
    arrival: int
    request: str
    envelope: str
    reason: str
    expired: bool


class WaitSession(Protocol):
    """A pod's waits inside its session (the pod's lock held): read them, end them, note why they still wait. Every
    change is part of the session's transaction (dropped when the block raises)."""

    async def pod_waits(self) -> list[PendingWait]:
        """The pod's waiting requests in arrival order (locked until the session ends)."""

    async def fail_wait(self, deploy_id: str, result: str) -> None:
        """The waiting deploy fails: its status `failed`, `result` (JSON text, an object) merged into its result; it
        leaves the queue."""

    async def admit_wait(self, deploy_id: str, status: str, result: str) -> None:
        """The waiting deploy was placed: its row takes the placement's `status` and `result` (JSON text) and it leaves
        the queue."""

    async def set_wait_reason(self, deploy_id: str, reason: str) -> None:
        """Why the deploy still waits (JSON text: code, message, details)."""

    async def tenants(self) -> dict[str, Tenant]:
        """Every tenant and group by name, as the session reads them now."""


class AdmissionQueue(Protocol):
    """What the admission loop asks between passes."""

    async def waiting_pods(self) -> list[str]:
        """The pods with waiting requests, in name order."""

    async def next_deadline(self) -> float | None:
        """Seconds until the earliest wait's deadline (negative when past), None when nothing waits."""

    def listen_admission(self, wake: Callable[[str], None]) -> AbstractAsyncContextManager[None]:
        """A block during which `wake(pod)` is called whenever a pass over `pod` may admit something: a wait was
        submitted there, capacity freed in a pod with waits, a tenant changed (PostgreSQL: `LISTEN eru_admission` on a
        connection of its own, held for the block)."""


__all__ = ["AdmissionQueue", "PendingWait", "WaitSession"]
