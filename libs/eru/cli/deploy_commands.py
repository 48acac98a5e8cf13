"""`eru deploy`: send a deploy request, follow it to its terminal event with a progress bar, show the placements
(`eru deploy ls|status|watch` for deploys made earlier: eru.cli.deploy_read_commands)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.app import app, group
from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    TimeoutOption,
    as_option,
    console,
    cpuset,
    deploy_subjects,
    fail,
    fail_with,
    nats_url,
    operation,
    query_all,
    refuse_nothing,
    run_async,
    run_with_bus,
    with_bus,
)
from eru.cli.deploy_request import DEPLOY_OPTIONS
from eru.cli.deploy_request import deploy_request as _request
from eru.cli.node_filter_options import ExcludeNodesOption, NodeLabelOption, NodesOption, node_filter
from eru.cli.output import Format, JsonOption, OutputOption, cell, chosen, document, emit

if TYPE_CHECKING:
    from nats.aio.client import Client
    from rich.table import Table

TERMINAL = ("completed", "partial", "failed")
ASK_AGAIN_SECONDS = 5.0
"""No answer this long after asking: ask again with the same request id (a reply sent while this client reconnected
is lost; the allocator answers a repeat from what it settled — docs/deploy.md "Clients: ask again with the same
request id"); then after 10 s, 20 s, … within the verb's timeout."""
LOOK_AFTER_SECONDS = 5.0
"""No deploy event this long while following: read the deploy's state from the ledger (its terminal event may have
been published while this client reconnected)."""
deploy_app = group("Deploy a workload, or follow a deploy.", invoke_without_command=True, no_args_is_help=False)
app.add_typer(deploy_app, name="deploy")


@dataclass
class DeployResult:
    """A followed deploy: its id, terminal event, and its containers as the allocator records them."""

    deploy_id: str
    terminal: Any
    containers: list[dict[str, Any]]
    decision_id: str | None = None


async def deploy_and_follow(
    nc: Client,
    request: Any,
    *,
    timeout: float,  # noqa: ASYNC109 - the whole deploy's deadline
    on_progress: Callable[[int, int], None] | None = None,
) -> DeployResult:
    """Send `request`, wait for its terminal event (calling `on_progress(done, total)` as containers report), and
    return it with the deploy's containers (progress comes from the allocator's `progress` events). Raises
    `RemoteError` when the request is refused."""
    import asyncio

    from eru.bus import request as bus_request
    from eru.bus.codec import decode
    from eru.domain import Accepted, DeployEvent
    from eru.domain.messages import QueryRequest

    deploy_events: dict[str, list[Any]] = {}
    changed = asyncio.Event()
    request_subject, events_subject = deploy_subjects()
    request = with_request_id(request)

    async def on_deploy_event(msg: Any) -> None:
        if msg.subject != request_subject:
            event = decode(msg.data, DeployEvent)
            deploy_events.setdefault(event.deploy_id, []).append(event)
            changed.set()

    # deploy events only; a tenant's client reads its tenant's copies `eru.t.<tenant>.deploy.*.*` (docs/security.md)
    subscriptions = [await nc.subscribe(events_subject, cb=on_deploy_event)]
    try:
        accepted = await bus_request(
            nc,
            request_subject,
            request,
            Accepted,
            min(timeout, 30.0),
            source="eru-cli",
            ask_again_after=ASK_AGAIN_SECONDS,
        )
        deploy_id = accepted.deploy_id
        async with asyncio.timeout(timeout):
            while True:
                events = deploy_events.get(deploy_id, [])
                planned = next((e for e in events if e.kind == "planned"), None)
                terminal = next((e for e in events if e.kind in TERMINAL), None)
                if on_progress is not None and planned is not None:
                    reported = {c for e in events if e.kind == "progress" for c in (*e.started, *e.failed)}
                    on_progress(len(reported), sum(planned.placements.values()))
                if terminal is not None:
                    break
                changed.clear()
                try:
                    await asyncio.wait_for(changed.wait(), LOOK_AFTER_SECONDS)
                except TimeoutError:
                    terminal = await _recorded_terminal(nc, deploy_id)
                    if terminal is not None:
                        break
        reply = await query_all(nc, QueryRequest(what="deploy", deploy_id=deploy_id), 10.0)
        recorded = reply.rows[0]["deploy"].get("result") or {}
        decision = terminal.decision_id or (planned.decision_id if planned is not None else None)
        decision = decision or (recorded.get("decision_id") if isinstance(recorded, dict) else None)
        return DeployResult(deploy_id, terminal, reply.rows[0]["containers"], decision)
    finally:
        for subscription in subscriptions:
            await subscription.unsubscribe()


def with_request_id(request: Any) -> Any:
    """`request` with a request id (a new one when it has none): asking again is safe only under the same id."""
    from eru.bus import new_id

    return request if request.request_id else request.model_copy(update={"request_id": new_id()})


async def _recorded_terminal(nc: Client, deploy_id: str) -> Any:
    """The deploy's terminal event rebuilt from the ledger when it has ended there, else None (also when the ledger
    cannot be read now: the caller looks again later)."""
    import contextlib

    from pydantic import ValidationError

    from eru.domain import DeployEvent
    from eru.domain.messages import QueryRequest
    from eru.errors import EruError

    try:
        reply = await query_all(nc, QueryRequest(what="deploy", deploy_id=deploy_id), 10.0)
    except EruError:
        return None
    deploy = reply.rows[0]["deploy"] if reply.rows else {}
    if deploy.get("status") not in TERMINAL:
        return None
    result = deploy.get("result") or {}
    result = result if isinstance(result, dict) else {}
    event = {"deploy_id": deploy_id, "kind": deploy["status"], "decision_id": result.get("decision_id")}
    with contextlib.suppress(ValidationError):  # an older record's shape: the kind alone still ends the wait
        shown = {"placements": result.get("placements") or {}, "error": result.get("error")}
        return DeployEvent.model_validate({**event, **shown})
    return DeployEvent.model_validate(event)


def placement_table(result: DeployResult) -> Table:
    """One row per container: node, state, cpuset, memory."""
    from rich.table import Table

    from eru.units import format_bytes

    table = Table(title=f"deploy {result.deploy_id}: {result.terminal.kind}")
    for column in ("container", "node", "state", "cpus", "numa", "memory", "reason"):
        table.add_column(column, overflow="fold")
    for row in result.containers:
        allocation = row["allocation"]
        table.add_row(
            row["id"],
            row["node"],
            row["state"],
            cpuset(allocation.get("cpu_map") or {}),
            str(allocation.get("numa_node") or "-"),
            format_bytes(int(allocation.get("memory") or 0)),
            cell(row.get("reason"), 300),
        )
    return table


@deploy_app.callback()
def deploy(
    ctx: typer.Context,
    pod: Annotated[str | None, typer.Option(help="The pod to deploy into.")] = None,
    image: Annotated[str | None, typer.Option(help="Container image.")] = None,
    name: Annotated[str | None, typer.Option(help="Workload name (default: derived from the image).")] = None,
    count: Annotated[int, typer.Option(help="Instances, at least 1 (for each/fill: per node).")] = 1,
    cpu: Annotated[
        float,
        typer.Option(
            help="CPU request in cores, e.g. 1.5. With --cpu-bind, whole cores plus one fragment: 1.5 is shown as "
            "`0:50 3` (50 of core 0's 100 pieces and all of core 3; docs/cli.md)."
        ),
    ] = 0.0,
    cpu_limit: Annotated[float, typer.Option(help="CPU limit in cores (0 = the request / unlimited).")] = 0.0,
    cpu_bind: Annotated[bool, typer.Option("--cpu-bind/--no-cpu-bind", help="Exclusive cores (cpuset).")] = False,
    memory: Annotated[str, typer.Option(help="Memory request, e.g. 512MiB.")] = "0",
    memory_limit: Annotated[str, typer.Option(help="Memory limit (0 = the request).")] = "0",
    mode: Annotated[str, typer.Option(help="Placement mode: auto, each, fill, global, drained, score.")] = "auto",
    nodes_limit: Annotated[int, typer.Option(help="Node limit of the mode (0 = none).")] = 0,
    priority_class: Annotated[str, typer.Option("--class", help="prod, mid or batch.")] = "prod",
    tenant: Annotated[str, typer.Option(help="Owner of the workload.")] = "default",
    command: Annotated[str | None, typer.Option(help="Command line of the container.")] = None,
    request_id: Annotated[str | None, typer.Option(help="Idempotency key (a retry never allocates twice).")] = None,
    wait_seconds: Annotated[
        float, typer.Option(help="Wait this long for capacity, admitted in DRF order (0 = fail at once, as Eru).")
    ] = 0.0,
    wait: Annotated[bool, typer.Option("--wait/--no-wait", help="Follow the deploy to its end.")] = True,
    keep: Annotated[
        bool,
        typer.Option(
            "--keep/--no-keep",
            help="eru places lost (and, batch, evicted) instances again elsewhere (docs/node-agent.md).",
        ),
    ] = False,
    max_unavailable: Annotated[
        str | None, typer.Option(help="Batch: eviction budget per window, a count or a percentage such as 25%.")
    ] = None,
    health_cmd: Annotated[
        str | None,
        typer.Option(help="Health check run inside each container (no shell); its state shows in `container ls`."),
    ] = None,
    health_interval: Annotated[str, typer.Option(help="How often the health check runs, e.g. 5s.")] = "5s",
    health_retries: Annotated[int, typer.Option(help="Failures in a row that make a container unhealthy.")] = 3,
    nodes: NodesOption = None,
    exclude_nodes: ExcludeNodesOption = None,
    node_label: NodeLabelOption = None,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 120.0,
) -> None:
    """Deploy COUNT instances of IMAGE into POD, show progress, then the placements, the deploy id and the decision id
    (`eru explain DECISION_ID` says why each node was or was not chosen; `eru replay DECISION_ID` re-runs it)."""
    if ctx.invoked_subcommand is not None:
        return
    if pod is None or image is None:
        fail("eru deploy needs --pod and --image (or a subcommand: status, watch)", code=2)
    refuse_nothing("--count", count)
    fmt = chosen(output, as_json)
    request = _request(
        pod=pod,
        image=image,
        name=name,
        count=count,
        cpu=cpu,
        cpu_limit=cpu_limit,
        cpu_bind=cpu_bind,
        memory=memory,
        memory_limit=memory_limit,
        mode=mode,
        nodes_limit=nodes_limit,
        priority_class=priority_class,
        tenant=tenant,
        command=command,
        request_id=request_id,
        wait_seconds=wait_seconds,
        keep=keep,
        max_unavailable=max_unavailable,
        health_cmd=health_cmd,
        health_interval=health_interval,
        health_retries=health_retries,
        node_filter=node_filter(nodes, exclude_nodes, node_label),
    )
    url = nats_url(nats, state_dir)
    if not wait:
        from eru.bus import request as bus_request
        from eru.domain import Accepted

        asked = with_request_id(request)
        accepted = run_with_bus(
            url,
            lambda nc: bus_request(
                nc, deploy_subjects()[0], asked, Accepted, timeout, ask_again_after=ASK_AGAIN_SECONDS
            ),
            DEPLOY_OPTIONS,
        )
        if fmt is not Format.text:
            emit(document("deploy", deploy_id=accepted.deploy_id, decision_id=None, status="accepted"), fmt)
            return
        console.print(f"accepted: deploy {accepted.deploy_id} (follow it: eru deploy watch {accepted.deploy_id})")
        return
    if fmt is not Format.text:
        follow_for = max(timeout, wait_seconds + 30.0)
        result = _follow(url, lambda nc: deploy_and_follow(nc, request, timeout=follow_for))
        emit(deploy_document(result), fmt)
        raise typer.Exit(0 if result.terminal.kind == "completed" else 1)
    follow_for = max(timeout, wait_seconds + 30.0)  # a waiting deploy may take its whole wait to be admitted
    if not console.get().is_terminal:  # a pipe or a log: no progress bar (rich would leave an empty line behind)
        result = _follow(url, lambda nc: deploy_and_follow(nc, request, timeout=follow_for))
    else:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        columns = (TextColumn("[bold]deploy"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console.get(), transient=True) as progress:
            task = progress.add_task("deploy", total=None)

            def advance(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            result = _follow(url, lambda nc: deploy_and_follow(nc, request, timeout=follow_for, on_progress=advance))
    console.print(placement_table(result))
    decision = result.decision_id
    console.print(f"deploy id:   {result.deploy_id}", highlight=False)
    if decision:
        console.print(f"decision id: {decision}  (why: eru explain {decision}; re-run: eru replay {decision})")
    if result.terminal.kind != "completed":
        error = result.terminal.error
        if error is not None:
            console.print(f"[red]{result.terminal.kind}[/] ({error.code}): {error.message}", highlight=False)
        for container, reason in result.terminal.failed.items():
            console.print(f"[red]failed[/] {container}: {reason}")
        raise typer.Exit(1)


def _follow(url: str, work: Callable[[Any], Awaitable[DeployResult]]) -> DeployResult:
    """Run the deploy; a refused one fails with one line naming its deploy id and decision id (`eru explain`)."""
    from eru.cli.failure import CliError
    from eru.errors import EruError

    try:
        return run_async(with_bus(url, work))
    except EruError as error:
        deploy_id = error.details.get("deploy_id")
        suffix, decision = "", None
        if isinstance(deploy_id, str):
            decision = _decision_of(url, deploy_id)
            suffix = f" (deploy {deploy_id}" + (f", decision {decision}: eru explain {decision})" if decision else ")")
        failure = CliError.of(error)  # its kind sets the exit code; -o json prints it (docs/cli.md "Errors")
        failure.message = as_option(error, DEPLOY_OPTIONS) + suffix  # the field as the option typed (--node-label)
        failure.details = {**failure.details, "decision_id": decision} if decision else failure.details
        fail_with(failure)


def _decision_of(url: str, deploy_id: str) -> str | None:
    """The decision id recorded for a deploy (None when it cannot be read)."""
    from eru.domain.messages import QueryRequest
    from eru.errors import EruError

    try:
        query = QueryRequest(what="deploy", deploy_id=deploy_id)
        reply = run_async(with_bus(url, lambda nc: operation(nc, "query", query, 5.0)))
    except EruError:
        return None
    result = reply.rows[0]["deploy"].get("result") or {}
    decision = result.get("decision_id") if isinstance(result, dict) else None
    return str(decision) if decision else None


def deploy_document(result: DeployResult) -> dict[str, Any]:
    """The `eru.cli/deploy` document (docs/cli.md)."""
    terminal = result.terminal
    error = terminal.error.model_dump(mode="json") if terminal.error is not None else None
    return document(
        "deploy",
        deploy_id=result.deploy_id,
        decision_id=result.decision_id,
        status=terminal.kind,
        placements=dict(terminal.placements),
        failed=dict(terminal.failed),
        error=error,
        containers=result.containers,
    )


# `eru deploy ls|status|watch` live in their own module; `eru deploy …` imports only this one (app.VERBS), which
# registers them on deploy_app
from eru.cli import deploy_read_commands  # noqa: E402, F401 - after deploy_app, which it imports
