"""The watermark overrides capability of the allocator's store (docs/colocation.md "Watermarks set live"): a node's or
a pod's override, changed under the pod's lock with every layer it combines with in hand, and every override for a
replica's resync. Implemented by PostgreSQL (`eru_allocator.store.watermark_store.PgWatermarks`) and in memory
(`eru.testing.memory_watermarks`); the contract suite (tests/integration/store/test_watermarks_contract.py) runs the
same cases against both.

`change_override` is atomic: the change callback and the message callback run inside the transaction, and an
exception from either leaves the override and the outbox as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from eru.store.protocol import OutboxMessage


@dataclass(frozen=True)
class NodeOverride:
    """A node of a pod and its own override (None when it has none)."""

    node: str
    settings: dict[str, int] | None


@dataclass(frozen=True)
class StoredOverride:
    """A stored override: its scope (`node` or `pod`), name, settings and version (cleared ones are kept)."""

    scope: str
    name: str
    settings: dict[str, int]
    version: int


@dataclass(frozen=True)
class OverrideLayers:
    """What a change of one override is validated with, read under the pod's lock: the pod the override belongs to,
    the override as it is ({} when none), and the layers it combines with: for a node's override the pod's
    (`pod_override`), for a pod's the overrides of the pod's nodes by name (`node_overrides`)."""

    pod: str
    current: dict[str, int]
    pod_override: dict[str, int] = field(default_factory=dict)
    node_overrides: list[NodeOverride] = field(default_factory=list)


class WatermarkStore(Protocol):
    """Watermark overrides of nodes and pods (see the module doc)."""

    async def change_override(
        self,
        scope: str,
        name: str,
        change: Callable[[OverrideLayers], Mapping[str, int]],
        message: Callable[[StoredOverride], OutboxMessage],
    ) -> StoredOverride | None:
        """Under the lock of the pod of `name` in `scope` (`node`: its pod; `pod`: itself), store `change(layers)` as
        its override (version 1, then one more per change) and queue `message(stored)` in the outbox; None (nothing
        changed) when `name` is unknown in `scope`."""

    async def overrides(self) -> list[StoredOverride]:
        """Every stored override by scope and name, cleared ones included (their version matters)."""


__all__ = ["NodeOverride", "OverrideLayers", "StoredOverride", "WatermarkStore"]
