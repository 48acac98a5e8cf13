"""Strays: eru's labels for this node on a container eru did not name (docs/node-agent.md "Inventory")."""

from __future__ import annotations

from eru.domain.resources import Allocation
from eru.nodeagent.engine import (
    L_ALLOCATION,
    L_CLASS,
    L_CONTAINER,
    L_MANAGED,
    L_NODE,
    engine_name,
    named_by_eru,
    stray_engine_id,
    stray_id,
)
from eru.nodeagent.inventory import classify


def labels(container_id: str, node: str) -> dict[str, str]:
    allocation = Allocation(memory=2**20).model_dump_json()
    return {L_MANAGED: "true", L_NODE: node, L_CONTAINER: container_id, L_CLASS: "prod", L_ALLOCATION: allocation}


def test_a_stray_is_named_by_its_engine_id_and_found_again_from_it() -> None:
    engine_id = "3f2a9c0d1e4b" + "0" * 52
    assert stray_id(engine_id) == "stray-3f2a9c0d1e4b"
    assert stray_engine_id(stray_id(engine_id)) == "3f2a9c0d1e4b"
    assert stray_engine_id("01a24e9d-5e44-7fee-ad41-8d1339cffeec") is None  # an eru id is never a stray's
    assert stray_engine_id("stray-not-hex") is None
    assert named_by_eru(engine_name("c1"), "c1")
    assert not named_by_eru("by-hand", "c1")


def test_at_a_restart_a_stray_is_foreign_not_adopted_even_with_a_remembered_id() -> None:
    engine = [
        ("a" * 64, engine_name("c1"), labels("c1", "n1"), "running"),
        ("b" * 64, "by-hand", labels("c1", "n1"), "running"),  # copies c1's labels
    ]
    found = classify("n1", engine, remembered=["c1"])
    assert set(found.present) == {"c1"}
    assert [f.container_id for f in found.foreign] == ["stray-bbbbbbbbbbbb"]
    assert "not eru's name (by-hand" in found.foreign[0].reason
