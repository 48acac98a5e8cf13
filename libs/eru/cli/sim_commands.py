"""`eru sim qos|drf|compaction`: the pure experiments (no services), each printing a table and writing a PNG."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from eru.cli.app import app, group
from eru.cli.bus_client import console, err_console, fail
from eru.cli.output import Format, OutputOption, document, emit, table_document
from eru.errors import EruError

sim_app = group("Pure, fast experiments: QoS balance, DRF, cell compaction (tables + PNG plots).")
app.add_typer(sim_app, name="sim")

OutDir = Annotated[Path, typer.Option("--out", help="Directory for the PNG plot.")]


def _prepare(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    return out


class _Report:
    """What an experiment shows: tables on stdout, or with -o json|yaml the `eru.cli/sim-<name>` document (its
    parameters, every table as rows, the plots written) with the progress and tables on stderr."""

    def __init__(self, name: str, fmt: Format, **parameters: Any) -> None:
        self.name, self.fmt, self.parameters = name, fmt, parameters
        self.tables: list[dict[str, Any]] = []
        self.plots: list[str] = []
        if fmt is not Format.text:
            console.use_stderr()

    def table(self, table: Any) -> None:
        """Show a table (and keep it for the document)."""
        console.print(table)
        if self.fmt is not Format.text:
            self.tables.append(table_document(table))

    def done(self) -> None:
        """Print the document when one was asked for."""
        if self.fmt is not Format.text:
            doc = document(f"sim-{self.name}", parameters=self.parameters, tables=self.tables, plots=self.plots)
            emit(doc, self.fmt)


def _plot(draw: Callable[[Path], Path], path: Path, report: _Report | None = None) -> None:
    """Write one plot; without matplotlib say so and keep the table."""
    from eru.sim.plots import PlotUnavailable

    try:
        written = draw(path)
        console.print(f"plot: {written}")
        if report is not None:
            report.plots.append(str(written))
    except PlotUnavailable as error:
        from rich.markup import escape

        err_console.print(f"[yellow]no plot:[/] {escape(str(error))}", highlight=False)  # keeps `eru[plot]`


def _fail(message: str) -> NoReturn:
    fail(message, 2)


@sim_app.command("qos")
def qos(
    instances: Annotated[int, typer.Option(help="Instances to place.")] = 3000,
    nodes: Annotated[int, typer.Option(help="Nodes in the pod.")] = 100,
    seed: Annotated[int, typer.Option(help="Seed of the population.")] = 1,
    out: OutDir = Path("sim-out"),
    output: OutputOption = Format.text,
) -> None:
    """(a) QoS balance: variance over nodes of per-class counts, least-allocated alone vs with qos-balance."""
    from rich.table import Table

    from eru.planning.scorers import QOS_CLASSES
    from eru.sim.plots import plot_qos
    from eru.sim.qos import qos_experiment

    if instances < 1 or nodes < 1:
        _fail("--instances and --nodes must be ≥ 1")
    report = _Report("qos", output, instances=instances, nodes=nodes, seed=seed)
    with console.status("placing instances…"):
        experiment = qos_experiment(instances, nodes, seed=seed)
    table = Table(title=f"QoS balance: {instances} instances on {nodes} nodes (variance over nodes of the count)")
    table.add_column("class")
    table.add_column("mix", justify="right")
    table.add_column("least-allocated", justify="right")
    table.add_column("+ qos-balance", justify="right")
    table.add_column("reduction", justify="right")
    for name in (*QOS_CLASSES, "mean"):
        if name == "mean":
            base, balanced, mix = experiment.baseline.mean_variance, experiment.balanced.mean_variance, ""
        else:
            base, balanced = experiment.baseline.variance[name], experiment.balanced.variance[name]
            mix = f"{experiment.mix.get(name, 0):.0%}"
        reduction = f"{1 - balanced / base:.0%}" if base else "-"
        table.add_row(name, mix, f"{base:.2f}", f"{balanced:.2f}", reduction)
    report.table(table)
    _plot(lambda path: plot_qos(experiment, path), _prepare(out) / "qos-balance.png", report)
    report.done()


@sim_app.command("drf")
def drf(
    scale: Annotated[int, typer.Option(help="Pod size multiplier for the variants after the canonical one.")] = 10,
    out: OutDir = Path("sim-out"),
    output: OutputOption = Format.text,
) -> None:
    """(b) DRF: the canonical example and weighted/quota/limit variants, dominant shares over time; a quota
    guarantee holding under a burst of other tenants."""
    from rich.table import Table

    from eru.sim.drf import drf_experiment
    from eru.sim.plots import plot_drf

    if scale < 1:
        _fail("--scale must be ≥ 1")
    report = _Report("drf", output, scale=scale)
    try:
        variants = drf_experiment(scale)
    except EruError as error:
        _fail(error.message)
    table = Table(title="DRF progressive filling (share = dominant share; weighted = share / weight)")
    for column in ("variant", "tenant", "weight", "tasks", "share", "weighted", "stopped by"):
        table.add_column(column, justify="left" if column in ("variant", "tenant", "stopped by") else "right")
    for variant in variants:
        result = variant.result
        for index, tenant in enumerate(result.tasks):
            weight = next(t.get("weight", 1) for t in variant.problem["tenants"] if t["name"] == tenant)
            stopped = result.stopped.get(tenant, {})
            reason = stopped.get("reason", "")
            if "resources" in stopped:
                reason += " (" + ", ".join(stopped["resources"]) + ")"
            table.add_row(
                variant.name if index == 0 else "",
                tenant,
                str(weight),
                str(result.tasks[tenant]),
                f"{float(result.dominant_shares[tenant]):.3f}",
                f"{float(result.shares[tenant]):.3f}",
                reason,
                end_section=index == len(result.tasks) - 1,
            )
    report.table(table)
    _plot(lambda path: plot_drf(variants, path), _prepare(out) / "drf-shares.png", report)
    _guarantee(out, report)
    report.done()


def _guarantee(out: Path, report: _Report) -> None:
    """(b2) A quota guarantee under a burst of other tenants (docs/fairness-and-scoring.md)."""
    from rich.table import Table

    from eru.sim.guarantee import guarantee_experiment
    from eru.sim.plots import plot_guarantee

    runs = guarantee_experiment()
    table = Table(
        title="Quota guarantee under a burst: 100 cores; B1-B3 ask 50 × 1 core each at step 0, G 30 at step 1"
    )
    for column in ("variant", "bursts hold at step 0", "G at arrival", "G reaches 30 at step", "G at step 60"):
        table.add_column(column, justify="left" if column == "variant" else "right")
    for run in runs:
        reached = run.steps_to(30)
        table.add_row(
            run.name,
            str(sum(c for t, c in run.held[0].items() if t != "G")),
            str(run.at_arrival),
            "never" if reached is None else str(reached),
            str(run.held[-1]["G"]),
        )
    report.table(table)
    _plot(lambda path: plot_guarantee(runs, 100, path), _prepare(out) / "drf-guarantee.png", report)


@sim_app.command("compaction")
def compaction(
    seeds: Annotated[int, typer.Option(help="Trials per mode (Borg: 11).")] = 11,
    workload_seed: Annotated[int, typer.Option(help="Seed of the generated workload.")] = 0,
    memory_tib: Annotated[float, typer.Option(help="Requested memory of the workload, TiB.")] = 4.0,
    prod_fraction: Annotated[float, typer.Option(help="Share of the requested memory that is prod.")] = 0.6,
    cores: Annotated[int, typer.Option(help="Cores per node.")] = 32,
    node_memory_gib: Annotated[int, typer.Option(help="Memory per node, GiB.")] = 128,
    mode: Annotated[list[str] | None, typer.Option(help="Modes to compare (repeatable; default all).")] = None,
    out: OutDir = Path("sim-out"),
    output: OutputOption = Format.text,
) -> None:
    """(c) Cell compaction: smallest cell with ≤ 0.2% pending per placement mode, p90 over seeds."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from eru.sim.compaction import MODES, NodeShape, compaction_experiment, lower_bound
    from eru.sim.plots import plot_compaction
    from eru.sim.workload import GIB, generate_workload, workload_totals

    modes = mode or list(MODES)
    unknown = [name for name in modes if name not in MODES]
    if unknown:
        _fail(f"unknown modes {unknown} (known: {', '.join(MODES)})")
    if seeds < 1 or cores < 1 or node_memory_gib < 1 or memory_tib <= 0 or not 0 <= prod_fraction <= 1:
        _fail("--seeds, --cores, --node-memory-gib, --memory-tib must be positive and --prod-fraction within 0..1")
    parameters = {"seeds": seeds, "workload_seed": workload_seed, "memory_tib": memory_tib, "cores": cores}
    report = _Report("compaction", output, **parameters, node_memory_gib=node_memory_gib, modes=modes)
    jobs = generate_workload(workload_seed, total_memory=int(memory_tib * (1 << 40)), prod_fraction=prod_fraction)
    totals = workload_totals(jobs)
    shape = NodeShape(cores, node_memory_gib * GIB)
    bound = lower_bound(jobs, shape)
    console.print(
        f"workload: {totals['jobs']} jobs, {totals['tasks']} tasks, {totals['cpu']:.0f} cores requested "
        f"({totals['bound_cpu']:.0f} bound), {totals['memory'] / GIB:.0f} GiB; node {cores} cores / "
        f"{node_memory_gib} GiB; lower bound {bound} nodes"
    )
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console.get()) as progress:
        task = progress.add_task("compacting", total=len(modes) * seeds)

        def advance(name: str, seed: int) -> None:
            progress.update(task, advance=1, description=f"{name} seed {seed}")

        try:
            results = compaction_experiment(jobs, shape=shape, modes=modes, seeds=seeds, progress=advance)
        except EruError as error:
            _fail(error.message)
    table = Table(title=f"Cell compaction: nodes needed (≤ 0.2% pending), {seeds} seeds")
    for column in ("mode", "min", "median", "p90", "max", "p90 vs bound"):
        table.add_column(column, justify="left" if column == "mode" else "right")
    for result in results:
        ranked = sorted(result.nodes)
        table.add_row(
            result.mode,
            str(ranked[0]),
            str(ranked[len(ranked) // 2]),
            f"[bold]{result.p90}[/]",
            str(ranked[-1]),
            f"+{result.p90 / bound - 1:.1%}",
        )
    report.table(table)
    _plot(lambda path: plot_compaction(results, bound, path), _prepare(out) / "compaction.png", report)
    report.done()


# `eru sim colocation` lives in its own module (issue 18); `eru sim` loads only this one, so it brings it along.
from eru.cli import sim_colocation_commands  # noqa: E402, F401  (registers on sim_app, defined above)
