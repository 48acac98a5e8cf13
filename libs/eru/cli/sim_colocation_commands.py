"""`eru sim colocation`: the colocation experiment (docs/colocation.md "The experiment") — a JSON summary per policy
on stdout and two PNG plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from eru.cli.bus_client import err_console
from eru.cli.output import Format, OutputOption, document, emit
from eru.cli.sim_commands import _fail, _prepare, sim_app
from eru.errors import EruError

PIECES = ("peak_room", "node_backoff", "budget", "progress", "keep")


@sim_app.command("colocation")
def colocation(
    trace: Annotated[str, typer.Option(help="Load trace: sine, sync (nodes peak together), step, recorded.")] = "sine",
    trace_file: Annotated[Path | None, typer.Option(help="A recorded trace (JSON) for --trace recorded.")] = None,
    hours: Annotated[float, typer.Option(help="Simulated hours of batch work.")] = 2.0,
    nodes: Annotated[int, typer.Option(help="Nodes in the pod.")] = 8,
    cores: Annotated[int, typer.Option(help="Cores per node.")] = 32,
    instances: Annotated[int, typer.Option(help="Batch instances of the workload.")] = 40,
    instance_cpu: Annotated[int, typer.Option(help="Cores each batch instance requests (and uses).")] = 2,
    job_cpu_hours: Annotated[float, typer.Option(help="CPU-hours of work per batch job.")] = 2.0,
    mean: Annotated[float, typer.Option(help="Mean latency-sensitive load, share of CPU.")] = 0.66,
    amplitude: Annotated[float, typer.Option(help="Amplitude of the oscillation, share of CPU.")] = 0.22,
    period_minutes: Annotated[float, typer.Option(help="Period of one load cycle, minutes.")] = 25.0,
    cool_nodes: Annotated[int, typer.Option(help="Nodes whose load stays low (a mixed pod).")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the traces.")] = 1,
    off: Annotated[
        list[str] | None, typer.Option(help=f"Turn a policy piece off (repeatable): {', '.join(PIECES)}.")
    ] = None,
    each: Annotated[bool, typer.Option(help="Also run the policy with each piece off in turn.")] = False,
    out: Annotated[Path, typer.Option("--out", help="Directory for the PNG plots.")] = Path("sim-out"),
    output: OutputOption = Format.text,
) -> None:
    """Batch work over oscillating latency-sensitive load with eru's real eviction and placement functions:
    baseline (every piece off: eru before issue 18) against the policy; prints one JSON summary."""
    from eru.sim.coloc_model import BASELINE, Policy, Scenario
    from eru.sim.coloc_plots import plot_summary, plot_timeline
    from eru.sim.coloc_traces import describe, make_traces
    from eru.sim.colocation import run_colocation

    unknown = [name for name in off or [] if name not in PIECES]
    if unknown:
        _fail(f"--off: unknown piece {unknown[0]!r} (known: {', '.join(PIECES)})")
    if min(nodes, cores, instances, instance_cpu) < 1 or hours <= 0 or job_cpu_hours <= 0 or period_minutes <= 0:
        _fail("--nodes, --cores, --instances, --instance-cpu, --hours, --job-cpu-hours, --period-minutes must be > 0")
    if not 0 <= cool_nodes <= nodes:
        _fail(f"--cool-nodes must be within 0..{nodes}")
    try:
        traces = make_traces(
            trace,
            nodes,
            seed=seed,
            mean=mean,
            amplitude=amplitude,
            period_seconds=period_minutes * 60,
            cool_nodes=cool_nodes,
            recorded=trace_file,
        )
    except EruError as error:
        _fail(error.message)
    scenario = Scenario(
        nodes=nodes,
        cores=cores,
        instances=instances,
        instance_cpu=instance_cpu,
        job_cpu_seconds=job_cpu_hours * 3600,
        hours=hours,
    )
    policy = Policy(**{name: name not in (off or []) for name in PIECES})
    policies = {"baseline": BASELINE, policy.name(): policy}
    if each:
        for name in PIECES:
            variant = Policy(**{piece: piece != name for piece in PIECES})
            policies[f"without {name}"] = variant
    with err_console.status(f"simulating {len(policies)} policies × {hours:g} h…"):
        results = run_colocation(scenario, traces, policies)
    report = {
        "scenario": {
            "trace": trace,
            "nodes": nodes,
            "cores": cores,
            "instances": instances,
            "instance_cpu": instance_cpu,
            "job_cpu_hours": job_cpu_hours,
            "hours": hours,
            "traces": describe(traces),
        },
        "results": {name: summary for name, (summary, _) in results.items()},
    }
    if output is Format.text:  # a JSON summary is its answer either way
        typer.echo(json.dumps(report, indent=2))
    else:
        emit(document("sim-colocation", **report), output)
    from eru.sim.plots import PlotUnavailable

    directory = _prepare(out)
    try:
        for draw, name in ((plot_timeline, "timeline"), (plot_summary, "summary")):
            err_console.print(f"plot: {draw(results, directory / f'colocation-{trace}-{name}.png')}")
    except PlotUnavailable as error:  # the JSON above stays the answer
        err_console.print(f"[yellow]no plot:[/] {error}", highlight=False)
