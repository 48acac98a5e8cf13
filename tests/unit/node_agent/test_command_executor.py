"""Command execution on the simulated runtime, without a bus: results, bad commands change nothing."""

from __future__ import annotations

import pytest

from eru.domain.messages import ContainerSpec, NodeCommand, Workload
from eru.domain.resources import Allocation
from eru.errors import InvalidInput
from eru_node_agent.commands import CommandExecutor
from eru_node_agent.runtime.sim import SimRuntime
from eru_node_agent.state import AgentState

CORES = [str(i) for i in range(4)]


def executor() -> tuple[CommandExecutor, SimRuntime]:
    runtime = SimRuntime("n1", cpu_cores=4)
    return CommandExecutor("n1", runtime, AgentState(), CORES, settle_seconds=0.05), runtime


def create(cid: str, **workload: object) -> NodeCommand:
    spec = ContainerSpec(
        container_id=cid,
        deploy_id="d1",
        workload=Workload.model_validate({"name": "w", "image": "sim", **workload}),
        allocation=Allocation(cpu_map={"0": 50}),
    )
    return NodeCommand(command_id=f"k-{cid}", node="n1", kind="create", container_id=cid, spec=spec)


async def test_create_update_stop_remove_report_one_event_each() -> None:
    run, runtime = executor()
    started = await run.execute(create("a"))
    assert (started.kind, started.deploy_id, started.allocation) == ("started", "d1", Allocation(cpu_map={"0": 50}))
    update = NodeCommand(
        command_id="k2", node="n1", kind="update", container_id="a", allocation=Allocation(cpu_map={"1": 100})
    )
    updated = await run.execute(update)
    assert (updated.kind, updated.command_kind) == ("updated", "update")
    assert runtime.containers["a"].allocation == Allocation(cpu_map={"1": 100})
    assert run.state.containers["a"].allocation == Allocation(cpu_map={"1": 100})
    stopped = await run.execute(NodeCommand(command_id="k3", node="n1", kind="stop", container_id="a"))
    assert stopped.kind == "stopped"
    removed = await run.execute(NodeCommand(command_id="k4", node="n1", kind="remove", container_id="a"))
    assert (removed.kind, removed.deploy_id) == ("removed", "d1")
    assert runtime.containers == {}
    again = await run.execute(NodeCommand(command_id="k5", node="n1", kind="pause", container_id="a"))
    assert again.kind == "removed"
    assert "does not exist" in again.reason


@pytest.mark.parametrize(
    ("command", "field"),
    [
        (NodeCommand(command_id="k", node="n1", kind="create", container_id="a"), "spec"),
        (NodeCommand(command_id="k", node="n1", kind="update", container_id="a"), "allocation"),
        (NodeCommand(command_id="k", node="n1", kind="replace", container_id="a"), "replacement"),
        (NodeCommand(command_id="k", node="n1", kind="stop", container_id="a.b"), "container_id"),
        (create("b", labels={"eru.tenant": "forged"}), "workload.labels.eru.tenant"),
        (NodeCommand.model_construct(command_id="k", node="n1", kind="resize", container_id="a"), "kind"),
    ],
)
async def test_bad_commands_name_the_field_and_change_nothing(command: NodeCommand, field: str) -> None:
    run, runtime = executor()
    await run.execute(create("a"))
    before = {cid: (c.state, c.allocation) for cid, c in runtime.containers.items()}
    with pytest.raises(InvalidInput) as error:
        await run.execute(command)
    assert error.value.field == field
    assert {cid: (c.state, c.allocation) for cid, c in runtime.containers.items()} == before


async def test_an_update_the_engine_refuses_keeps_the_old_allocation() -> None:
    run, runtime = executor()
    await run.execute(create("a"))
    bad = NodeCommand(
        command_id="k2", node="n1", kind="update", container_id="a", allocation=Allocation(cpu_map={"7": 100})
    )
    with pytest.raises(InvalidInput):
        await run.execute(bad)
    assert runtime.containers["a"].allocation == Allocation(cpu_map={"0": 50})


async def test_replace_rolls_back_an_unhealthy_replacement_and_keeps_the_old_one_running() -> None:
    run, runtime = executor()
    await run.execute(create("old"))
    sick = ContainerSpec(
        container_id="new",
        deploy_id="d2",
        workload=Workload(name="w", image="sim", labels={"eru.sim.unhealthy": "true"}, health_command=["check"]),
        allocation=Allocation(),
    )
    command = NodeCommand(
        command_id="r", node="n1", kind="replace", container_id="old", replacement=sick, health_timeout_seconds=0.3
    )
    result = await run.execute(command)
    assert (result.kind, result.container_id, result.replaced_container_id) == ("failed", "new", "old")
    assert "health check did not pass" in result.reason
    assert set(runtime.containers) == {"old"}
    assert runtime.containers["old"].state == "running"


async def test_a_replace_redelivered_after_a_crash_still_unpauses_the_old_container_on_rollback() -> None:
    run, runtime = executor()
    await run.execute(create("old"))
    sick = ContainerSpec(
        container_id="new",
        deploy_id="d2",
        workload=Workload(name="w", image="sim", labels={"eru.sim.exit_after": "0"}),
        allocation=Allocation(),
    )
    # The first attempt paused the old container and created the new one, then the agent died.
    await runtime.pause("old")
    await runtime.create(sick, {}, CORES)
    command = NodeCommand(command_id="r", node="n1", kind="replace", container_id="old", replacement=sick)
    result = await run.execute(command)
    assert result.kind == "failed"
    assert runtime.containers["old"].state == "running"
    assert "new" not in runtime.containers


async def test_restart_stops_and_starts_in_place_and_dissociate_leaves_the_engine_alone() -> None:
    from eru_node_agent.inventory import list_entries
    from eru_node_agent.state import MemoryStateStore

    run, runtime = executor()
    await run.execute(create("a"))
    first_start = runtime.containers["a"].started_at
    runtime.clock = lambda: (first_start or 0.0) + 5.0
    restarted = await run.execute(NodeCommand(command_id="k2", node="n1", kind="restart", container_id="a"))
    assert (restarted.kind, restarted.command_kind, restarted.allocation) == (
        "started",
        "restart",
        Allocation(cpu_map={"0": 50}),
    )
    assert runtime.containers["a"].state == "running"
    assert runtime.containers["a"].started_at == (first_start or 0.0) + 5.0
    dissociated = await run.execute(NodeCommand(command_id="k3", node="n1", kind="dissociate", container_id="a"))
    assert (dissociated.kind, dissociated.deploy_id) == ("dissociated", "d1")
    assert runtime.containers["a"].state == "running"  # the engine keeps it
    assert "a" not in run.state.containers
    # listed as not eru's: the reconciler reports it, never removes it (before: managed, `unknown` → removed)
    (entry,) = await list_entries(runtime, "n1", set(), run.state.containers, run.state.dissociated)
    assert (entry.managed, entry.state) == (False, "running")
    store = MemoryStateStore()
    store.save(run.state)
    assert store.load().dissociated == {"a"}
    assert run.state.from_json(run.state.to_json()).dissociated == {"a"}
    again = await run.execute(NodeCommand(command_id="k4", node="n1", kind="dissociate", container_id="a"))
    assert again.kind == "dissociated"
    missing = await run.execute(NodeCommand(command_id="k5", node="n1", kind="dissociate", container_id="zz"))
    assert missing.kind == "removed"
