"""`eru run --pod P --image I [--count N] [--timeout 30s] -- CMD ARGS…`: Eru's RunAndWait. Deploy CMD like any
workload, stream each container's output from its start, wait for every one to exit, remove them (unless --keep)
and exit with the largest exit code (docs/cli.md "eru run", docs/node-agent.md "Logs and exec")."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.app import app
from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    fail,
    fail_with,
    nats_url,
    operation,
    run_async,
    with_bus,
)
from eru.cli.exec_commands import check_command, session_document
from eru.cli.output import Format, OutputOption, document, emit

if TYPE_CHECKING:
    from nats.aio.client import Client

DEPLOY_SECONDS = 120.0
"""How long the deploy of a run may take to start its containers (the run's own `--timeout` starts after)."""
TIMED_OUT = 124
"""The exit code of a run that `--timeout` ended (its containers killed and removed), as timeout(1)'s."""


def seconds(text: str) -> float:
    """`30s`, `5m`, `1h` or a bare number of seconds, more than 0; else one line naming --timeout (exit 2)."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    value, unit = (text[:-1], units[text[-1]]) if text and text[-1] in units else (text, 1.0)
    try:
        parsed = float(value) * unit
    except ValueError:
        parsed = -1.0
    if not parsed > 0 or parsed == float("inf"):
        fail(f"--timeout: {text!r} is not a duration (30s, 5m, 1h or seconds, more than 0)", code=2, field="--timeout")
    return parsed


class Run:
    """One run: its deploy, its containers' sessions, and how it ended."""

    def __init__(self, request: Any, fmt: Format, limit: float | None, deploy_timeout: float, keep: bool) -> None:
        self.request = request
        self.fmt = fmt
        self.limit = limit
        self.deploy_timeout = deploy_timeout
        self.keep = keep
        self.deploy_id = ""
        self.containers: list[str] = []
        self.sessions: list[Any] = []
        self.timed_out = False

    async def __call__(self, nc: Client) -> None:
        from eru.cli.attach_client import attach, write_through
        from eru.cli.deploy_commands import deploy_and_follow
        from eru.nodeagent.attach import Prefixed

        result = await deploy_and_follow(nc, self.request, timeout=self.deploy_timeout)
        self.deploy_id = result.deploy_id
        self.containers = sorted(row["id"] for row in result.containers if row["state"] not in ("failed", "removed"))
        try:
            if result.terminal.kind != "completed":
                reasons = "; ".join(f"{cid}: {why}" for cid, why in result.terminal.failed.items())
                error = result.terminal.error
                reason = error.message if error is not None else reasons or result.terminal.kind
                fail(f"eru run: deploy {result.deploy_id} {result.terminal.kind}: {reason}", code=1)
            prefixed = Prefixed()
            many = len(self.containers) > 1

            def sink_of(index: int) -> Any:
                if self.fmt is not Format.text:
                    return None
                if not many:
                    return write_through
                prefix = f"[{index}] "
                return lambda stream, text: write_through(stream, prefixed.lines(prefix, stream, text))

            sessions = [
                attach(nc, cid, "logs", sink=sink_of(index), follow=True)
                for index, cid in enumerate(self.containers, start=1)
            ]
            try:
                async with asyncio.timeout(self.limit):
                    self.sessions = await asyncio.gather(*sessions)
            except TimeoutError:
                self.timed_out = True
            if many and self.fmt is Format.text:
                for index in range(1, len(self.containers) + 1):
                    for stream in ("stdout", "stderr"):
                        write_through(stream, prefixed.rest(f"[{index}] ", stream))
        finally:
            await asyncio.shield(self.clean_up(nc))

    async def clean_up(self, nc: Client) -> None:
        """Remove the run's containers (also after Ctrl-C or the timeout; `--keep` keeps them unless timed out)."""
        from eru.domain.messages import RemoveRequest

        if self.containers and (not self.keep or self.timed_out):
            request = RemoveRequest(container_ids=self.containers, reason="eru run ended")
            await operation(nc, "remove", request, 10.0)

    def exit_code(self) -> int:
        """The largest exit code of the containers (TIMED_OUT after the timeout)."""
        if self.timed_out:
            return TIMED_OUT
        codes = [s.exit_code for s in self.sessions]
        return max((code if code is not None else 1) for code in codes) if codes else 0


@app.command(
    "run",
    help="Run a command to its end in new containers: its output, its exit code.",
)
def run(
    command: Annotated[list[str] | None, typer.Argument(metavar="-- CMD [ARGS]...")] = None,
    pod: Annotated[str, typer.Option(help="The pod to run in.")] = "",
    image: Annotated[str, typer.Option(help="Container image.")] = "",
    name: Annotated[str | None, typer.Option(help="Workload name (default: derived from the image).")] = None,
    count: Annotated[int, typer.Option(help="Instances; their lines are prefixed [1] … [N].")] = 1,
    cpu: Annotated[float, typer.Option(help="CPU request in cores.")] = 0.0,
    cpu_limit: Annotated[float, typer.Option(help="CPU limit in cores (0 = the request / unlimited).")] = 0.0,
    memory: Annotated[str, typer.Option(help="Memory request, e.g. 64MiB.")] = "0",
    memory_limit: Annotated[str, typer.Option(help="Memory limit (0 = the request).")] = "0",
    tenant: Annotated[str, typer.Option(help="Owner of the workload.")] = "default",
    run_timeout: Annotated[
        str | None, typer.Option("--timeout", help="Kill and remove them after this long (30s, 5m, 1h); exit 124.")
    ] = None,
    keep: Annotated[bool, typer.Option("--keep", help="Keep the containers after they exit.")] = False,
    output: OutputOption = Format.text,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
) -> None:
    """Deploy CMD, stream its output as it runs, wait for every instance to exit, remove them (unless --keep) and
    exit with the largest exit code (docs/cli.md "eru run"). Ctrl-C removes them and exits 130."""
    from eru.cli.deploy_request import deploy_request
    from eru.errors import EruError

    if not pod or not image:
        fail("eru run needs --pod and --image", code=2, field="--pod" if not pod else "--image")
    if count < 1:
        fail(f"--count must be at least 1 (got {count}): the run would do nothing", code=2, field="--count")
    args = check_command(list(command or []))
    limit = seconds(run_timeout) if run_timeout is not None else None
    fields = {"cpu_bind": False, "mode": "auto", "nodes_limit": 0, "priority_class": "prod", "request_id": None}
    request = deploy_request(
        pod=pod, image=image, name=name, count=count, cpu=cpu, cpu_limit=cpu_limit, memory=memory,
        memory_limit=memory_limit, tenant=tenant, command=None, wait_seconds=0.0, **fields,
    )  # fmt: skip
    workload = request.workload.model_copy(update={"command": args})
    running = Run(request.model_copy(update={"workload": workload}), output, limit, DEPLOY_SECONDS, keep)
    try:
        run_async(with_bus(nats_url(nats, state_dir), running))
    except EruError as error:
        fail_with(error)
    if output is not Format.text:
        emit(
            document(
                "run",
                deploy_id=running.deploy_id,
                exit_code=running.exit_code(),
                timed_out=running.timed_out,
                containers=[session_document("exec", s) for s in running.sessions],
            ),
            output,
        )
    raise typer.Exit(running.exit_code())
