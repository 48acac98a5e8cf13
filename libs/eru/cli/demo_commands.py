"""`eru demo` (the README's `make demo`): the whole pipeline on the embedded stack, then everything stops.

It starts nats-server, PostgreSQL and the services (`eru up --detach` in its own state directory and ports), waits
for the simulated nodes to register, deploys workloads in several placement modes, reallocates, replaces and removes
containers, prints the nodes and containers, and stops the stack, leaving no process behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.app import app
from eru.cli.bus_client import console, fail, operation, query_all, run_async
from eru.cli.container_commands import container_table
from eru.cli.deploy_commands import DeployResult, deploy_and_follow, placement_table
from eru.cli.failure import Kind
from eru.cli.node_commands import node_table
from eru.cli.output import Format, OutputOption, document, emit
from eru.errors import EruError

if TYPE_CHECKING:
    from nats.aio.client import Client

POD = "default"


def _workload(name: str, image: str, **resources: Any) -> dict[str, Any]:
    return {"name": name, "image": image, "resources": resources}


STEPS: list[tuple[str, dict[str, Any]]] = [
    (
        "auto: 6 web servers, 1.5 cores each bound to cpusets (one whole core + a half fragment), 512MiB",
        {
            "mode": "auto",
            "count": 6,
            "workload": _workload("web", "nginx:1.27", cpu_bind=True, cpu_request=1.5, memory_request="512MiB"),
        },
    ),
    (
        "each: one log agent on every node, 0.5 core by CFS quota (not bound), 128MiB",
        {
            "mode": "each",
            "count": 1,
            "workload": _workload("log-agent", "fluent-bit:3", cpu_request=0.5, memory_request="128MiB"),
        },
    ),
    (
        "fill: top every node up to 2 cache instances, 1GiB soft memory each",
        {
            "mode": "fill",
            "count": 2,
            "workload": _workload("cache", "redis:7", memory_request="1GiB", memory_soft=True),
        },
    ),
    (
        "drained: 5 batch workers packed onto as few nodes as possible, 2 cores bound each",
        {
            "mode": "drained",
            "count": 5,
            "workload": {
                **_workload("batch", "worker:2", cpu_bind=True, cpu_request=2, memory_request="2GiB"),
                "priority_class": "batch",
            },
        },
    ),
    (
        "global: 3 API instances where memory usage stays lowest, 3GiB each",
        {"mode": "global", "count": 3, "workload": _workload("api", "api:5", cpu_request=1, memory_request="3GiB")},
    ),
]


def Rule(title: str) -> Any:  # noqa: N802 - stands in for rich's Rule, imported on use
    """A rich `Rule` with `title`."""
    from rich.rule import Rule as RichRule

    return RichRule(title)


async def _wait_for_nodes(nc: Client, count: int, timeout: float) -> list[dict[str, Any]]:  # noqa: ASYNC109
    import asyncio

    from eru.domain.messages import QueryRequest

    deadline = time.monotonic() + timeout
    while True:
        try:
            reply = await query_all(nc, QueryRequest(what="nodes", pod=POD), 2.0)
            rows: list[dict[str, Any]] = reply.rows
            if len([r for r in rows if r["state"] == "up"]) >= count:
                return rows
        except EruError:
            pass  # the allocator is still starting
        if time.monotonic() > deadline:
            raise EruError(f"{count} nodes did not register within {timeout:.0f} s", code="demo")
        await asyncio.sleep(0.3)


async def _containers(nc: Client, **where: Any) -> list[dict[str, Any]]:
    from eru.domain.messages import QueryRequest

    reply = await query_all(nc, QueryRequest(what="containers", pod=POD, **where), 5.0)
    rows: list[dict[str, Any]] = reply.rows
    return rows


async def _settled(nc: Client, ids: list[str], timeout: float = 20.0) -> list[dict[str, Any]]:  # noqa: ASYNC109
    """The containers once none of `ids` is in a transient state any more."""
    import asyncio

    deadline = time.monotonic() + timeout
    while True:
        rows = [r for r in await _containers(nc, include_gone=True) if r["id"] in ids]
        if all(r["state"] not in ("planned", "creating", "updating", "stopping") for r in rows):
            return rows
        if time.monotonic() > deadline:
            raise EruError("containers did not settle in time: " + ", ".join(r["id"] for r in rows), code="demo")
        await asyncio.sleep(0.2)


async def _docker_image() -> str | None:
    """The local test image's tag when a Docker engine answers (imported once if missing), else None."""
    try:
        from eru.embedded.docker_image import engine_problem, ensure_test_image

        if await engine_problem() is not None:
            return None
        return await ensure_test_image()
    except Exception:  # no engine, no busybox to build the image from: the demo runs on sim nodes only
        return None


async def _docker_part(nc: Client, image: str, nodes: int) -> list[str]:
    """Move the Docker node into its own pod, deploy two real containers there; returns their ids."""
    from eru.domain import DeployRequest
    from eru.domain.messages import QueryRequest, SetNodeRequest

    rows = await _wait_for_nodes(nc, nodes + 1, 60)
    docker_node = next(r["name"] for r in rows if not r["name"].startswith("sim"))
    await operation(nc, "set-node", SetNodeRequest(node=docker_node, pod="docker"), 10)
    console.print(Rule(f"docker: 2 real containers on {docker_node} (pod docker), 0.5 core bound + 32MiB each"))
    body = {
        "pod": "docker",
        "mode": "auto",
        "count": 2,
        "workload": {
            "name": "sleeper",
            "image": image,
            "command": ["sleep", "3600"],
            "resources": {"cpu_bind": True, "cpu_request": 0.5, "memory_request": "32MiB"},
        },
    }
    result = await deploy_and_follow(nc, DeployRequest.model_validate(body), timeout=60)
    console.print(placement_table(result))
    reply = await query_all(nc, QueryRequest(what="nodes", pod="docker"), 5)
    console.print(node_table(reply.rows))
    return [row["id"] for row in result.containers]


async def run_demo(nats_url: str, nodes: int, docker_image: str | None = None) -> None:
    """The demo's story over the bus, against a running stack."""
    from eru.bus import connect
    from eru.domain import DeployRequest
    from eru.domain.messages import ReallocRequest, RemoveRequest, ReplaceRequest

    nc = await connect(nats_url, name="eru-demo")
    try:
        console.print(Rule("the nodes registered by the sim node agent"))
        console.print(node_table(await _wait_for_nodes(nc, nodes, 60)))
        docker_containers = await _docker_part(nc, docker_image, nodes) if docker_image else []
        results: dict[str, DeployResult] = {}
        for title, body in STEPS:
            console.print(Rule(title))
            request = DeployRequest.model_validate({"pod": POD, **body})
            result = await deploy_and_follow(nc, request, timeout=60)
            results[request.workload.name] = result
            console.print(f"placements: {result.terminal.placements or _placements(result)}")
            console.print(placement_table(result))

        console.print(Rule("realloc: the first two web servers get +0.5 core and +256MiB, in place"))
        web = [r["id"] for r in results["web"].containers][:2]
        reply = await operation(
            nc, "realloc", ReallocRequest(container_ids=web, cpu_request=0.5, memory_request="256MiB"), 10
        )
        console.print(reply.message, *reply.warnings)
        console.print(container_table(await _settled(nc, web), title="after realloc"))

        console.print(Rule("replace: one log agent moves to a new image, keeping its allocation"))
        old = results["log-agent"].containers[0]["id"]
        reply = await operation(nc, "replace", ReplaceRequest(container_id=old, image="fluent-bit:3.1"), 10)
        new = reply.rows[0]["new"]
        console.print(reply.message)
        console.print(container_table(await _settled(nc, [old, new], 30), title="replace: old and new"))

        console.print(Rule("removal: the batch workers are done; their cores go back to the nodes"))
        batch = [r["id"] for r in results["batch"].containers] + docker_containers
        reply = await operation(nc, "remove", RemoveRequest(container_ids=batch, reason="batch finished"), 10)
        console.print(reply.message)
        await _settled(nc, batch)

        console.print(Rule("final state"))
        from eru.domain.messages import QueryRequest

        nodes_now = await query_all(nc, QueryRequest(what="nodes", pod=POD), 5)
        console.print(node_table(nodes_now.rows))
        console.print(container_table(await _containers(nc), title="running containers"))
    finally:
        await nc.close()


def _placements(result: DeployResult) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in result.containers:
        counts[row["node"]] = counts.get(row["node"], 0) + 1
    return dict(sorted(counts.items()))


def _stop_stack(state_dir: Path, timeout: float = 30.0) -> None:
    from eru.stack.info import StackInfo, pid_alive

    info = StackInfo.load(state_dir)
    if info is None or not pid_alive(info.supervisor_pid):
        return
    os.kill(info.supervisor_pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while pid_alive(info.supervisor_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [name for name, pid in info.processes.items() if pid_alive(pid)]
    if pid_alive(info.supervisor_pid) or left:
        console.print(f"[red]still running after {timeout:.0f} s:[/] supervisor {info.supervisor_pid} {left}")
    else:
        console.print("stack stopped: no process left behind")


@app.command()
def demo(
    state_dir: Annotated[Path, typer.Option("--state-dir", help="State directory of the demo's stack.")] = Path(
        ".state/demo"
    ),
    nodes: Annotated[int, typer.Option(help="Simulated nodes.")] = 4,
    nats_port: Annotated[int, typer.Option(help="Port of the demo's nats-server.")] = 14322,
    postgres_port: Annotated[int, typer.Option(help="Port of the demo's PostgreSQL.")] = 15532,
    docker: Annotated[bool, typer.Option(help="Add a Docker node when an engine answers.")] = True,
    output: OutputOption = Format.text,
) -> None:
    """Start the embedded stack, deploy in several modes, realloc, replace, remove, show the result, stop (with -o
    json|yaml the story goes to stderr, the `eru.cli/demo` document to stdout)."""
    if output is not Format.text:
        console.use_stderr()
    from eru.stack.info import StackInfo, pid_alive
    from eru.up.runner import StackOptions, run_stack

    existing = StackInfo.load(state_dir)
    if existing is not None and pid_alive(existing.supervisor_pid):
        fail(
            f"a stack is already running from {state_dir} (pid {existing.supervisor_pid}); stop it with "
            f"`eru down --state-dir {state_dir}`",
            code=Kind.refused,
        )
    # the demo tells its story from an empty cluster: a previous run's database and streams are dropped
    shutil.rmtree(state_dir, ignore_errors=True)
    image = run_async(_docker_image()) if docker else None
    console.print(f"Docker engine: {'yes, one Docker node joins' if image else 'none, sim nodes only'}")
    options = StackOptions(
        state_dir=state_dir.resolve(),
        nats_url=None,
        database_dsn=None,
        nats_port=nats_port,
        postgres_port=postgres_port,
        sim_nodes=nodes,
        docker_node=image is not None,
        console_port=None,  # the demo stops its stack when done: no web console to open (and no port to hold)
    )
    try:
        run_stack(options, console=console.get(), detach=True)
    except EruError as error:
        fail(error.message, code=3)
    try:
        info = StackInfo.load(options.state_dir)
        assert info is not None
        run_async(run_demo(info.nats_url, nodes, image))
    except EruError as error:
        fail(f"demo failed: {error.message} (logs in {options.state_dir / 'logs'})")
    finally:
        _stop_stack(options.state_dir)
    if output is not Format.text:
        fields = {"nodes": nodes, "docker_node": image is not None, "stopped": True}
        emit(document("demo", state_dir=str(options.state_dir), completed=True, **fields), output)
