"""`eru sim` on the command line: tables, plots, readable errors."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from eru.cli import commands  # noqa: F401  (registers the commands)
from eru.cli.app import app

runner = CliRunner()


def test_sim_drf_prints_the_table_and_writes_the_plot(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sim", "drf", "--scale", "2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "canonical" in result.output
    assert (tmp_path / "drf-shares.png").stat().st_size > 0


def test_sim_qos_small_run(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sim", "qos", "--instances", "300", "--nodes", "10", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "BestEffort" in result.output
    assert (tmp_path / "qos-balance.png").exists()


def test_sim_compaction_small_run_and_bad_mode(tmp_path: Path) -> None:
    args = ["sim", "compaction", "--seeds", "2", "--memory-tib", "0.1", "--mode", "drained", "--out", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "drained" in result.output
    assert (tmp_path / "compaction.png").exists()
    result = runner.invoke(app, ["sim", "compaction", "--mode", "random", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown modes" in result.output
