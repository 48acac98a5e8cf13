"""`eru deploy` asks again only under one request id (docs/deploy.md "Clients: ask again with the same request id"):
it makes one when the user gave none, and keeps the user's."""

from __future__ import annotations

from eru.cli.deploy_commands import with_request_id
from eru.domain import DeployRequest

BODY = {"pod": "p1", "workload": {"name": "web", "image": "busybox"}}


def test_a_request_without_an_id_gets_one_that_every_ask_shares() -> None:
    request = with_request_id(DeployRequest.model_validate(BODY))
    assert request.request_id
    assert with_request_id(request) is request  # asked again: the same id
    assert with_request_id(DeployRequest.model_validate(BODY)).request_id != request.request_id


def test_the_users_request_id_is_kept() -> None:
    request = DeployRequest.model_validate({**BODY, "request_id": "mine-1"})
    assert with_request_id(request).request_id == "mine-1"
