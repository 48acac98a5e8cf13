"""Colocation (docs/colocation.md), pure: windows, reservations and batch capacity, watermarks, suppression,
eviction."""

from eru.colocation.config import ColocationConfig, parse_config, resolve_config
from eru.colocation.policy import (
    ContainerInfo,
    Decision,
    NodeSpec,
    NodeState,
    Sample,
    Usage,
    Victim,
    choose_victims,
    decide,
    window_point,
)
from eru.colocation.quota import spread_quota
from eru.colocation.reservation import BatchCapacity, Reservation, batch_capacity
from eru.colocation.window import SlidingWindow, WindowPoint, WindowStats, cores, micro

__all__ = [
    "BatchCapacity",
    "ColocationConfig",
    "ContainerInfo",
    "Decision",
    "NodeSpec",
    "NodeState",
    "Reservation",
    "Sample",
    "SlidingWindow",
    "Usage",
    "Victim",
    "WindowPoint",
    "WindowStats",
    "batch_capacity",
    "choose_victims",
    "cores",
    "decide",
    "micro",
    "parse_config",
    "resolve_config",
    "spread_quota",
    "window_point",
]
