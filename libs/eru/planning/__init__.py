"""The planning core (docs/planning.md, docs/placement-modes.md): pure functions from node snapshots and a request to
capacities and plans.

No I/O, no clock: the allocator, the simulator and `eru plan` all call these same functions.
"""

from eru.planning.capacity import (
    materialize,
    node_capacities,
    node_capacity,
    placement_slots,
)
from eru.planning.deploy import DeployPlan, plan_deploy
from eru.planning.modes import NodeSlot, PlacementRequest, place
from eru.planning.realloc import (
    ReallocResult,
    ResourceDelta,
    RunningContainer,
    final_request,
    plan_realloc,
    plan_realloc_group,
)
from eru.planning.request import NormalizedRequest, PlanningConfig, config_from_mapping, normalize_request
from eru.planning.resources import ContainerPlan, NodeResources, charge, node_from_mapping, release

__all__ = [
    "ContainerPlan",
    "DeployPlan",
    "NodeResources",
    "NodeSlot",
    "NormalizedRequest",
    "PlacementRequest",
    "PlanningConfig",
    "ReallocResult",
    "ResourceDelta",
    "RunningContainer",
    "charge",
    "config_from_mapping",
    "final_request",
    "materialize",
    "node_capacities",
    "node_capacity",
    "node_from_mapping",
    "normalize_request",
    "place",
    "placement_slots",
    "plan_deploy",
    "plan_realloc",
    "plan_realloc_group",
    "release",
]
