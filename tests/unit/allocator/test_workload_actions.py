"""The lifecycle verbs' rules (eru_allocator.operations.workloads.actions, lifecycle.transition) and a workload's
health: pure, no I/O."""

from __future__ import annotations

import pytest

from eru_allocator.containers.lifecycle import LIVE_STATES, holds_resources, transition
from eru_allocator.operations.workloads.actions import decide
from eru_allocator.operations.workloads.views import health


@pytest.mark.parametrize(
    ("action", "state", "act", "note", "refusal"),
    [
        ("stop", "running", True, None, None),
        ("stop", "stopped", False, "container c1 is already stopped", None),
        ("stop", "creating", False, None, "container c1 is creating; only a running container can be stopped"),
        ("start", "stopped", True, None, None),
        ("start", "running", False, "container c1 is already running", None),
        ("start", "removed", False, None, "container c1 is removed; only a stopped container can be started"),
        ("restart", "running", True, None, None),
        ("restart", "stopped", True, None, None),
        ("restart", "paused", False, None, "container c1 is paused; only a running or stopped container can be "
         "restarted"),
        ("dissociate", "paused", True, None, None),
        ("dissociate", "removed", False, "container c1 is already removed", None),
        ("dissociate", "stopping", False, None, "container c1 is stopping; only a paused, running or stopped "
         "container can be dissociated"),
    ],
)  # fmt: skip
def test_what_each_verb_does_by_state(
    action: str, state: str, act: bool, note: str | None, refusal: str | None
) -> None:
    decision = decide(action, "c1", state)
    assert (decision.act, decision.note, decision.refusal) == (act, note, refusal)


def test_a_stopped_container_keeps_its_allocation_and_moves_only_on_confirmation() -> None:
    assert "stopped" in LIVE_STATES
    assert holds_resources("stopped", False)
    assert transition("running", "stopped", command="stop") == transition("running", "stopped", command="stop")
    stopped = transition("running", "stopped", command="stop")
    assert stopped is not None
    assert (stopped.state, stopped.releases) == ("stopped", False)
    # a container that exited by itself is reported `stopped` with no command: the ledger keeps what it had
    assert transition("running", "stopped") is None
    started = transition("stopped", "started", command="start")
    assert started is not None
    assert started.state == "running"
    assert transition("stopped", "found") is None  # an agent restart finds it exited: still stopped
    # a stop or start the engine refused leaves the container as it was (before: failed, resources released)
    refused = transition("stopped", "failed", command="start")
    assert refused is not None
    assert (refused.state, refused.releases) == ("stopped", False)
    gone = transition("stopped", "dissociated", command="dissociate")
    assert gone is not None
    assert (gone.state, gone.releases) == ("removed", True)


def test_health_of_a_workload() -> None:
    assert health({"running": 3}) == "healthy"
    assert health({"running": 2, "removed": 4}) == "healthy"
    assert health({"stopped": 3}) == "stopped"
    assert health({"running": 1, "stopped": 2}) == "degraded"
    assert health({"creating": 2}) == "down"


def test_a_failing_health_check_makes_the_workload_unhealthy() -> None:
    assert health({"running": 3}, unhealthy=1) == "unhealthy"
    assert health({"running": 2, "stopped": 1}, unhealthy=2) == "unhealthy"
    assert health({"running": 3}, starting=1) == "starting"
    assert health({"running": 3}, unhealthy=0, starting=0) == "healthy"
