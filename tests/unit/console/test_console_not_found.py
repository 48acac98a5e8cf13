"""The console answers an unknown id 404, now that the allocator says `not_found` for it (docs/cli.md "Exit codes");
bad paging input stays 400 and any other error reply 502."""

from __future__ import annotations

from eru.bus.errors import RemoteError
from eru.console.server import _remote_status


def test_unknown_ids_are_404_paging_400_the_rest_502() -> None:
    assert _remote_status(RemoteError("not_found", "deploy_id: unknown deploy 'x'", {"field": "deploy_id"})) == 404
    assert _remote_status(RemoteError("invalid_input", "decision_id: needed", {"field": "decision_id"})) == 404
    assert _remote_status(RemoteError("invalid_input", "limit: too big", {"field": "limit"})) == 400
    assert _remote_status(RemoteError("insufficient_resource", "no room")) == 502
