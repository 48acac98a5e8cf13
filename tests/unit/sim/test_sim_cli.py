"""`eru sim` on the command line: tables, plots, readable errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from eru.cli import commands  # noqa: F401  (registers the commands)
from eru.cli.app import app

runner = CliRunner()
PLOT_REASON = "matplotlib is not installed: pip install 'eru[plot]' for the PNG plots"


def _needs_matplotlib() -> None:
    pytest.importorskip("matplotlib", reason=PLOT_REASON)


def test_sim_drf_prints_the_table_and_writes_the_plot(tmp_path: Path) -> None:
    _needs_matplotlib()
    result = runner.invoke(app, ["sim", "drf", "--scale", "2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "canonical" in result.output
    assert (tmp_path / "drf-shares.png").stat().st_size > 0


def test_sim_qos_small_run(tmp_path: Path) -> None:
    _needs_matplotlib()
    result = runner.invoke(app, ["sim", "qos", "--instances", "300", "--nodes", "10", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "BestEffort" in result.output
    assert (tmp_path / "qos-balance.png").exists()


def test_sim_compaction_small_run_and_bad_mode(tmp_path: Path) -> None:
    _needs_matplotlib()
    args = ["sim", "compaction", "--seeds", "2", "--memory-tib", "0.1", "--mode", "drained", "--out", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "drained" in result.output
    assert (tmp_path / "compaction.png").exists()
    result = runner.invoke(app, ["sim", "compaction", "--mode", "random", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "unknown modes" in result.output


def test_without_matplotlib_the_table_is_printed_and_the_plot_step_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError, as when missing
    result = runner.invoke(app, ["sim", "drf", "--scale", "2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "canonical" in result.output  # the table
    assert "pip install 'eru[plot]'" in " ".join(result.output.split())
    assert not (tmp_path / "drf-shares.png").exists()
