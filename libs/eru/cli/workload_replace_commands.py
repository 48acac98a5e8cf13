"""`eru workload replace NAME --image NEW` and `eru workload history NAME` (docs/cli.md "Rolling replace"): a
workload's instances replaced wave by wave with the existing replace with rollback, a failed wave rolled back and the
rollout stopped (eru.rollout); the images a workload has run."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    TimeoutOption,
    console,
    fail,
    nats_url,
    operation,
    query_all,
    refuse_invalid,
    run_with_bus,
)
from eru.cli.failure import Kind
from eru.cli.output import Format, JsonOption, OutputOption, cell, chosen, document, emit
from eru.cli.workload_group import workload_app

if TYPE_CHECKING:
    from nats.aio.client import Client

PodOption = Annotated[str | None, typer.Option(help="Only the workload's instances in this pod.")]
SETTLE_MARGIN_SECONDS = 60.0  # beyond --healthy-within: creating the new container, the commands' round trips
POLL_SECONDS = 0.5


@workload_app.command("replace")
def workload_replace(
    name: Annotated[str, typer.Argument(help="The workload.")],
    image: Annotated[str, typer.Option(help="The new image.")],
    pod: PodOption = None,
    max_parallel: Annotated[int, typer.Option(help="Instances replaced at once (one wave).")] = 1,
    healthy_within: Annotated[
        str, typer.Option(help="How long each new container has to pass its health command, e.g. 30s.")
    ] = "30s",
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Replace the workload's running instances with IMAGE, MAX_PARALLEL at a time, each wave healthy before the
    next; a failed wave is rolled back and the rollout stops (exit 1), saying which instances run which image."""
    from pydantic import ValidationError

    from eru.domain.messages import ReplaceRequest
    from eru.errors import InvalidInput
    from eru.units import parse_seconds

    fmt = chosen(output, as_json)
    if max_parallel < 1:
        fail(f"--max-parallel must be at least 1 (got {max_parallel})", code=2, field="--max-parallel")
    try:
        within = parse_seconds(healthy_within, "--healthy-within")
        ReplaceRequest(container_id="check", image=image, health_timeout_seconds=within)
    except InvalidInput as error:
        fail(f"{error.field}: {error.reason}", code=2, field=error.field)
    except ValidationError as error:
        refuse_invalid(error, {"image": "--image", "health_timeout_seconds": "--healthy-within"})
    url = nats_url(nats, state_dir)
    report = run_with_bus(url, lambda nc: _rollout(nc, name, image, pod, max_parallel, within, timeout))
    if report["outcome"] != "completed":
        failed = report["waves"][-1]
        fail(
            f"workload {name}: wave {failed['wave']} failed ({failed['reason']}); rolled back and stopped: "
            + _running_text(report["running"]),
            code=Kind.refused,
            rollout={k: v for k, v in report.items() if k not in ("schema", "schema_version")},
        )
    if fmt is not Format.text:
        emit(report, fmt)
        return
    for wave in report["waves"]:
        console.print(f"wave {wave['wave']}: " + ", ".join(f"{r['old']} → {r['new']}" for r in wave["replaced"]))
    console.print(f"workload {name}: {report['message']}; " + _running_text(report["running"]))


def _running_text(running: dict[str, list[str]]) -> str:
    return "; ".join(f"{len(ids)} on {image} ({', '.join(ids)})" for image, ids in running.items()) or "none running"


async def _rows(nc: Client, pod: str | None, timeout: float) -> list[dict[str, Any]]:  # noqa: ASYNC109
    from eru.domain.messages import QueryRequest

    return list((await query_all(nc, QueryRequest(what="containers", pod=pod), timeout)).rows)


async def _settle(nc: Client, ids: list[str], seconds: float, timeout: float) -> dict[str, tuple[str, str]]:  # noqa: ASYNC109
    """Each new container's verdict (eru.rollout.verdict) and reason, waiting until none is pending or `seconds`."""
    import asyncio

    from eru.domain.messages import QueryRequest
    from eru.rollout import verdict

    deadline = time.monotonic() + seconds
    results: dict[str, tuple[str, str]] = {}
    while True:
        for cid in [c for c in ids if c not in results]:
            query = QueryRequest(what="containers", container_id=cid, include_gone=True)
            reply = await operation(nc, "query", query, timeout)
            row = reply.rows[0] if reply.rows else None
            found = verdict(row)
            if found != "pending" and row is not None:
                running = row.get("state") == "running"
                reason = "unhealthy" if running and row.get("health") == "unhealthy" else row.get("reason") or ""
                results[cid] = (found, str(reason))
        if len(results) == len(ids):
            return results
        if time.monotonic() >= deadline:
            for cid in ids:
                results.setdefault(cid, ("failed", f"no outcome within {seconds:g}s"))
            return results
        await asyncio.sleep(POLL_SECONDS)


async def _replace(nc: Client, container_id: str, image: str, within: float, timeout: float) -> str:  # noqa: ASYNC109
    from eru.domain.messages import ReplaceRequest

    request = ReplaceRequest(container_id=container_id, image=image, health_timeout_seconds=within)
    reply = await operation(nc, "replace", request, timeout)
    return str(reply.rows[0]["new"])


async def _rollout(
    nc: Client,
    name: str,
    image: str,
    pod: str | None,
    max_parallel: int,
    within: float,
    timeout: float,  # noqa: ASYNC109
) -> dict[str, Any]:
    from eru.errors import NotFound
    from eru.rollout import images_running, to_replace, waves

    rows = await _rows(nc, pod, timeout)
    if not any(r.get("workload") == name for r in rows):
        raise NotFound("NAME", f"workload {name!r} has no running instance" + (f" in pod {pod}" if pod else ""))
    todo = to_replace(rows, name, image)
    previous = {str(r["id"]): str(r["image"]) for r in todo}
    done: list[dict[str, Any]] = []
    outcome, message = "completed", f"{len(todo)} instances replaced with {image}" if todo else f"already on {image}"
    for number, wave in enumerate(waves(list(previous), max_parallel), 1):
        started = {old: await _replace(nc, old, image, within, timeout) for old in wave}
        verdicts = await _settle(nc, list(started.values()), within + SETTLE_MARGIN_SECONDS, timeout)
        replaced = [
            {"old": old, "new": new, "result": verdicts[new][0], "reason": verdicts[new][1]}
            for old, new in started.items()
        ]
        failures = [r for r in replaced if r["result"] != "ok"]
        if not failures:
            done.append({"wave": number, "replaced": replaced, "result": "ok", "reason": ""})
            continue
        # roll the wave back: its new containers that did start go back to their previous image
        back = {
            r["new"]: await _replace(nc, r["new"], previous[r["old"]], within, timeout)
            for r in replaced
            if r["result"] == "ok"
        }
        undone = await _settle(nc, list(back.values()), within + SETTLE_MARGIN_SECONDS, timeout) if back else {}
        rolled = [{"from": new, "to": again, "result": undone[again][0]} for new, again in back.items()]
        reason = "; ".join(f"{r['new']}: {r['reason']}" for r in failures)
        done.append(
            {"wave": number, "replaced": replaced, "result": "rolled_back", "reason": reason, "rollback": rolled}
        )
        outcome, message = "rolled_back", f"wave {number} failed and was rolled back"
        break
    running = images_running(await _rows(nc, pod, timeout), name)
    return document(
        "workload-replace",
        workload=name,
        image=image,
        max_parallel=max_parallel,
        healthy_within_seconds=within,
        outcome=outcome,
        message=message,
        waves=done,
        running=running,
    )


@workload_app.command("history")
def workload_history(
    name: Annotated[str, typer.Argument(help="The workload.")],
    pod: PodOption = None,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    nats: NatsOption = None,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    timeout: TimeoutOption = 10.0,
) -> None:
    """The images the workload has run, oldest first: when first and last, how many containers, how many run it now."""
    from pydantic import ValidationError

    from eru.domain.messages import QueryRequest

    fmt = chosen(output, as_json)
    try:
        request = QueryRequest(what="workload_history", workload=name, pod=pod)
    except ValidationError as error:
        refuse_invalid(error, {"workload": "NAME", "pod": "--pod"})
    reply = run_with_bus(nats_url(nats, state_dir), lambda nc: operation(nc, "query", request, timeout))
    if not reply.rows:
        fail(f"workload {name!r} has run no container" + (f" in pod {pod}" if pod else ""), code=Kind.not_found)
    if fmt is not Format.text:
        emit(document("workload-history", workload=name, images=reply.rows), fmt)
        return
    from rich.table import Table

    table = Table(title=f"workload {name}: images")
    for column in ("image", "first", "last", "containers", "running"):
        table.add_column(column, overflow="fold")
    for row in reply.rows:
        table.add_row(
            cell(row["image"]), cell(row["first_at"]), cell(row["last_at"]), str(row["instances"]), str(row["live"])
        )
    console.print(table)
