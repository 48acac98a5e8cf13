"""Pod security policy: which container privileges and images a pod admits (pure; docs/security.md).

A workload asking for privileged mode, host mounts, the host network or added capabilities is refused unless its
pod's policy allows exactly that; a pod may also restrict images to an allow-list of glob patterns. The allocator
checks this before anything is allocated, so a refused request changes nothing.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from pydantic import Field, ValidationError

from eru.domain.messages import Workload
from eru.domain.resources import Frozen
from eru.errors import InvalidInput

# Network modes that keep the container off the host's network stack.
ISOLATED_NETWORKS = frozenset({"none", "bridge", "default"})


class PodPolicy(Frozen):
    """What a pod admits; the default admits no privilege and any image."""

    allow_privileged: bool = False
    allow_host_network: bool = False
    allow_host_mounts: bool = False
    allowed_capabilities: list[str] = Field(default_factory=list)
    image_allow_list: list[str] = Field(default_factory=list)


def parse_policy(raw: Mapping[str, Any] | None, field: str = "policy") -> PodPolicy:
    """A `PodPolicy` from a pod's stored policy object; unknown or mistyped keys are `InvalidInput`."""
    try:
        return PodPolicy.model_validate(dict(raw or {}))
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise InvalidInput(f"{field}.{where}" if where else field, first["msg"]) from None


def check_workload(workload: Workload, policy: PodPolicy, pod: str) -> None:
    """Raise `InvalidInput` naming the first field the policy of `pod` forbids; return when all is allowed."""
    if workload.privileged and not policy.allow_privileged:
        raise InvalidInput(
            "workload.privileged", f"privileged containers are not allowed in pod {pod!r} (policy.allow_privileged)"
        )
    if workload.network_mode not in ISOLATED_NETWORKS and not policy.allow_host_network:
        raise InvalidInput(
            "workload.network_mode",
            f"network mode {workload.network_mode!r} is not allowed in pod {pod!r} "
            f"(allowed: {', '.join(sorted(ISOLATED_NETWORKS))}; policy.allow_host_network admits others)",
        )
    if workload.mounts and not policy.allow_host_mounts:
        raise InvalidInput(
            "workload.mounts",
            f"host mounts ({workload.mounts[0]!r}) are not allowed in pod {pod!r} (policy.allow_host_mounts)",
        )
    allowed = {c.upper() for c in policy.allowed_capabilities}
    for capability in workload.cap_add:
        if "ALL" not in allowed and capability.upper().removeprefix("CAP_") not in {
            a.removeprefix("CAP_") for a in allowed
        }:
            raise InvalidInput(
                "workload.cap_add",
                f"capability {capability!r} is not allowed in pod {pod!r} (policy.allowed_capabilities: "
                f"{sorted(allowed) or 'none'})",
            )
    if policy.image_allow_list and not any(fnmatch.fnmatchcase(workload.image, p) for p in policy.image_allow_list):
        raise InvalidInput(
            "workload.image",
            f"image {workload.image!r} is not on pod {pod!r}'s allow-list ({', '.join(policy.image_allow_list)})",
        )
