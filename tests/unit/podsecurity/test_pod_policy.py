"""Pod security policy (eru.podsecurity): privileges and images are refused unless the pod allows them."""

from __future__ import annotations

from typing import Any

import pytest

from eru.domain import Workload
from eru.errors import InvalidInput
from eru.podsecurity import PodPolicy, check_workload, parse_policy

PLAIN = Workload(name="web", image="registry.local/web:1")


def workload(**changes: Any) -> Workload:
    return PLAIN.model_copy(update=changes)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"privileged": True}, "workload.privileged"),
        ({"network_mode": "host"}, "workload.network_mode"),
        ({"mounts": ["/etc:/host-etc:ro"]}, "workload.mounts"),
        ({"cap_add": ["NET_ADMIN"]}, "workload.cap_add"),
    ],
)
def test_each_privilege_is_refused_by_default_naming_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_workload(workload(**changes), PodPolicy(), "p1")
    assert caught.value.field == field
    assert "'p1'" in caught.value.reason


def test_a_plain_workload_passes_the_default_policy() -> None:
    check_workload(PLAIN, PodPolicy(), "p1")
    check_workload(workload(network_mode="bridge"), PodPolicy(), "p1")


def test_the_policy_admits_exactly_what_it_names() -> None:
    policy = PodPolicy(
        allow_privileged=True, allow_host_network=True, allow_host_mounts=True, allowed_capabilities=["NET_ADMIN"]
    )
    check_workload(
        workload(privileged=True, network_mode="host", mounts=["/data:/data"], cap_add=["CAP_NET_ADMIN"]), policy, "p"
    )
    with pytest.raises(InvalidInput, match="SYS_ADMIN"):
        check_workload(workload(cap_add=["SYS_ADMIN"]), policy, "p")
    check_workload(workload(cap_add=["SYS_ADMIN"]), PodPolicy(allowed_capabilities=["ALL"]), "p")


def test_image_allow_list_uses_globs() -> None:
    policy = PodPolicy(image_allow_list=["registry.local/*", "busybox:*"])
    check_workload(PLAIN, policy, "p")
    check_workload(workload(image="busybox:1.36"), policy, "p")
    with pytest.raises(InvalidInput) as caught:
        check_workload(workload(image="evil.example/miner:latest"), policy, "p")
    assert caught.value.field == "workload.image"


def test_stored_policies_are_validated_naming_the_key() -> None:
    assert parse_policy(None) == PodPolicy()
    assert parse_policy({"allow_privileged": True}).allow_privileged
    with pytest.raises(InvalidInput) as caught:
        parse_policy({"allow_priviledged": True})
    assert caught.value.field == "policy.allow_priviledged"
    with pytest.raises(InvalidInput) as caught:
        parse_policy({"image_allow_list": "busybox"})
    assert caught.value.field == "policy.image_allow_list"
