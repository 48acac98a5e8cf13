"""Who may ask for and read logs/exec streams (docs/security.md "Logs and exec"): a tenant's client asks on its own
attach subject and reads only its own stream subjects; a node agent answers only its own nodes' attach requests and
may publish the streams; nothing else changes for them."""

from __future__ import annotations

import pytest

from eru.bus.access import client_permissions, node_agent_permissions
from eru.bus.subjects import attach_stream, node_attach, tenant_operation
from eru.errors import InvalidInput


def test_a_tenant_asks_on_its_own_attach_subject_and_reads_only_its_streams() -> None:
    permissions = client_permissions("tenant-a", "a")
    assert tenant_operation("a", "attach") == "eru.t.a.allocator.attach"
    assert "eru.t.a.allocator.attach" in permissions.publish
    assert "eru.t.a.attach.>" in permissions.subscribe
    assert not any("eru.t.b" in subject or subject.startswith("eru.node") for subject in permissions.publish)
    assert permissions.to_config()["allow_responses"] is True  # it answers its sessions' pings
    assert attach_stream("a", "s1") == "eru.t.a.attach.s1"
    assert attach_stream(None, "s1") == "eru.attach.s1"


def test_a_node_agent_answers_its_own_nodes_attach_requests_only() -> None:
    permissions = node_agent_permissions("agent-1", ["n1", "n2"])
    assert {node_attach("n1"), node_attach("n2")} <= set(permissions.subscribe)
    assert "eru.node.n3.attach" not in permissions.subscribe
    assert {"eru.attach.*", "eru.t.*.attach.*"} <= set(permissions.publish)


def test_a_session_or_tenant_that_would_widen_a_subject_is_refused() -> None:
    with pytest.raises(InvalidInput, match="session"):
        attach_stream("a", "s.>")
    with pytest.raises(InvalidInput, match="tenant"):
        attach_stream("a.*", "s1")
