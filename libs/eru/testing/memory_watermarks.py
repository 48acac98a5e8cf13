"""The watermark overrides capability (`eru.store.watermarks.WatermarkStore`) in memory, mixed into `InMemoryStore`
(eru.testing.memory_store): the same answers as PostgreSQL's `PgWatermarks` (the contract suite,
tests/integration/store/test_watermarks_contract.py, runs both). A change holds the pod's asyncio lock (the one its
pod sessions take); the message goes to the store's `outbox` (a repeated envelope id is dropped, as PostgreSQL's
`ON CONFLICT (event_id) DO NOTHING` drops it); nothing is written when a callback raises.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from eru.store.protocol import OutboxMessage
from eru.store.watermarks import NodeOverride, OverrideLayers, StoredOverride, WatermarkStore


class _Node(Protocol):
    pod: str


@dataclass
class MemoryWatermarkState:
    """(scope, name) → (settings, version) of every stored override."""

    stored: dict[tuple[str, str], tuple[dict[str, int], int]] = field(default_factory=dict)


class MemoryWatermarks:
    """`WatermarkStore` over the store's `pods`, `nodes`, `outbox` and pod locks (see the module doc)."""

    pods: dict[str, dict[str, Any]]
    nodes: Mapping[str, _Node]
    outbox: list[OutboxMessage]
    _locks: dict[str, asyncio.Lock]

    @property
    def watermark_state(self) -> MemoryWatermarkState:
        """The capability's own state, made on first use."""
        state = self.__dict__.get("_watermark_state")
        if state is None:
            state = self.__dict__["_watermark_state"] = MemoryWatermarkState()
        assert isinstance(state, MemoryWatermarkState)
        return state

    def _settings(self, scope: str, name: str) -> dict[str, int]:
        found = self.watermark_state.stored.get((scope, name))
        return dict(found[0]) if found is not None else {}

    def _pod_of(self, scope: str, name: str) -> str | None:
        if scope == "node":
            node = self.nodes.get(name)
            return None if node is None else node.pod
        return name if name in self.pods else None

    async def change_override(
        self,
        scope: str,
        name: str,
        change: Callable[[OverrideLayers], Mapping[str, int]],
        message: Callable[[StoredOverride], OutboxMessage],
    ) -> StoredOverride | None:
        """Under the pod's lock: the layers read, `change` and `message` called, then both written."""
        pod = self._pod_of(scope, name)
        if pod is None:
            return None
        async with self._locks.setdefault(pod, asyncio.Lock()):
            current = self._settings(scope, name)
            if scope == "node":
                layers = OverrideLayers(pod, current, pod_override=self._settings("pod", pod))
            else:
                members = sorted(node for node, row in self.nodes.items() if row.pod == pod)
                overrides = [
                    NodeOverride(
                        node, self._settings("node", node) if ("node", node) in self.watermark_state.stored else None
                    )
                    for node in members
                ]
                layers = OverrideLayers(pod, current, node_overrides=overrides)
            new = dict(change(layers))
            before = self.watermark_state.stored.get((scope, name))
            stored = StoredOverride(scope, name, new, 1 if before is None else before[1] + 1)
            outgoing = message(stored)
            self.watermark_state.stored[(scope, name)] = (dict(new), stored.version)
            if all(queued.envelope.id != outgoing.envelope.id for queued in self.outbox):
                self.outbox.append(outgoing)
        return stored

    async def overrides(self) -> list[StoredOverride]:
        """Every override by scope and name."""
        return [
            StoredOverride(scope, name, dict(settings), version)
            for (scope, name), (settings, version) in sorted(self.watermark_state.stored.items())
        ]


def _conforms(store: MemoryWatermarks) -> WatermarkStore:
    """Where mypy checks that `MemoryWatermarks` is a `WatermarkStore`."""
    return store
