"""Pydantic models of eru's domain and messages.

The names below are imported on first use (PEP 562): `eru.planning` needs only `eru.domain.resources`, and building
every message model costs `eru plan` ~100 ms it does not need (docs/cli.md, "Fast start").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from eru.domain.colocation import EvictionDecision, EvictionVictim, NodeCondition
    from eru.domain.messages import (
        Accepted,
        ContainerEvent,
        ContainerEvents,
        ContainerMetrics,
        ContainerReport,
        ContainerSpec,
        DeployEvent,
        DeployRequest,
        ErrorReply,
        GroupCommands,
        GroupEvents,
        Heartbeat,
        NodeCommand,
        NodeCommandMessage,
        NodeCommands,
        NodeHeartbeats,
        NodeMetrics,
        NodeRegistration,
        Workload,
    )
    from eru.domain.placement import (
        PlaceBatchReply,
        PlaceBatchRequest,
        PlacementSlot,
        PlaceOutcome,
        PlaceReply,
        PlaceRequest,
    )
    from eru.domain.resources import Allocation, ResourceRequest

__all__ = [
    "Accepted",
    "Allocation",
    "ContainerEvent",
    "ContainerEvents",
    "ContainerMetrics",
    "ContainerReport",
    "ContainerSpec",
    "DeployEvent",
    "DeployRequest",
    "ErrorReply",
    "EvictionDecision",
    "EvictionVictim",
    "GroupCommands",
    "GroupEvents",
    "Heartbeat",
    "NodeCommand",
    "NodeCommandMessage",
    "NodeCommands",
    "NodeCondition",
    "NodeHeartbeats",
    "NodeMetrics",
    "NodeRegistration",
    "PlaceBatchReply",
    "PlaceBatchRequest",
    "PlaceOutcome",
    "PlaceReply",
    "PlaceRequest",
    "PlacementSlot",
    "ResourceRequest",
    "Workload",
]

_MODULES = {
    "EvictionDecision": "colocation",
    "EvictionVictim": "colocation",
    "NodeCondition": "colocation",
    "Allocation": "resources",
    "ResourceRequest": "resources",
    **dict.fromkeys(
        ["PlaceBatchReply", "PlaceBatchRequest", "PlaceOutcome", "PlaceReply", "PlaceRequest", "PlacementSlot"],
        "placement",
    ),
}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'eru.domain' has no attribute {name!r}")
    module = importlib.import_module(f"eru.domain.{_MODULES.get(name, 'messages')}")
    value = getattr(module, name)
    globals()[name] = value
    return value
