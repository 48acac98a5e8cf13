"""Pydantic models of eru's domain and messages."""

from eru.domain.colocation import EvictionDecision, EvictionVictim, NodeCondition
from eru.domain.messages import (
    Accepted,
    ContainerEvent,
    ContainerMetrics,
    ContainerSpec,
    DeployEvent,
    DeployRequest,
    ErrorReply,
    Heartbeat,
    NodeCommand,
    NodeMetrics,
    NodeRegistration,
    PlacementSlot,
    PlaceReply,
    PlaceRequest,
    Workload,
)
from eru.domain.resources import Allocation, ResourceRequest

__all__ = [
    "Accepted",
    "Allocation",
    "ContainerEvent",
    "ContainerMetrics",
    "ContainerSpec",
    "DeployEvent",
    "DeployRequest",
    "ErrorReply",
    "EvictionDecision",
    "EvictionVictim",
    "Heartbeat",
    "NodeCommand",
    "NodeCondition",
    "NodeMetrics",
    "NodeRegistration",
    "PlaceReply",
    "PlaceRequest",
    "PlacementSlot",
    "ResourceRequest",
    "Workload",
]
