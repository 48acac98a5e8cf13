"""Which dead letters the allocator's recorder settles, and under which key (docs/store.md "Settled requests")."""

from __future__ import annotations

from eru.bus import new_envelope
from eru.domain import DeployRequest
from eru_allocator.delivery.dead_letter_recorder import is_deploy_request_subject
from eru_allocator.delivery.settled import dead_letter_key


def _request(request_id: str | None) -> DeployRequest:
    return DeployRequest.model_validate(
        {"request_id": request_id, "pod": "default", "count": 1, "workload": {"name": "w", "image": "busybox"}}
    )


def test_only_deploy_request_subjects_are_recorded() -> None:
    assert is_deploy_request_subject("eru.deploy.request")
    assert is_deploy_request_subject("eru.t.team-a.deploy.request")
    assert not is_deploy_request_subject("eru.t.team-a.allocator.remove")
    assert not is_deploy_request_subject("eru.node.n1.command")
    assert not is_deploy_request_subject("eru.t.deploy.request")
    assert not is_deploy_request_subject("")


def test_a_tenants_dead_letter_is_settled_under_its_scoped_key() -> None:
    envelope = new_envelope("eru.deploy.request", "test")
    assert dead_letter_key("eru.t.team-a.deploy.request", _request("r-1"), envelope) == "team-a/r-1"
    assert dead_letter_key("eru.deploy.request", _request("r-1"), envelope) == "r-1"
    assert dead_letter_key("eru.deploy.request", _request(None), envelope) == envelope.id
    assert dead_letter_key("eru.t.team-a.deploy.request", _request(None), envelope) == envelope.id
