"""Machine-readable output and the small rules of the CLI: versioned documents, JSON/YAML without Python reprs,
integral counters as integers, requests that would do nothing refused, the status document, the observability
files (docs/cli.md, docs/operations.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from eru.bus.discovery import _integral
from eru.cli import commands  # noqa: F401  (registers every verb)
from eru.cli.app import app
from eru.cli.bus_client import cpuset, number
from eru.cli.output import Format, document, render
from eru.cli.stack_commands import status_document
from eru.observability import dashboard, scrape_config, service_of, write_observability
from eru.stack.info import StackInfo

runner = CliRunner()


def test_documents_carry_their_schema_and_version_first() -> None:
    doc = document("node-ls", nodes=[])
    assert list(doc)[:2] == ["schema", "schema_version"]
    assert doc["schema"] == "eru.cli/node-ls"
    assert doc["schema_version"] == 1


def test_render_json_and_yaml_without_python_reprs() -> None:
    doc = {"when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "ids": ("a", "b"), "raw": b"\x01", "n": 3}
    as_json = json.loads(render(doc, Format.json))
    assert as_json == {"when": "2026-01-02T03:04:05+00:00", "ids": ["a", "b"], "raw": "01", "n": 3}
    as_yaml = render(doc, Format.yaml)
    assert yaml.safe_load(as_yaml) == as_json
    assert "!!python" not in as_yaml
    assert "('a'" not in as_yaml


def test_counters_print_as_integers() -> None:
    assert number(3.0) == "3"
    assert number(2) == "2"
    assert number(0.125) == "0.125"
    assert number(True) == "True"
    assert _integral(4.0) == 4
    assert isinstance(_integral(4.0), int)
    assert _integral(0.5) == 0.5


def test_cpuset_notation_whole_cores_bare_fragments_with_pieces() -> None:
    assert cpuset({"5": 100, "0": 50}) == "0:50 5"
    assert cpuset({"10": 100, "2": 100}) == "2 10"  # numeric order, not string order
    assert cpuset({}) == "-"


@pytest.mark.parametrize("args", [["deploy", "--pod", "p", "--image", "busybox", "--count", "0"]])
def test_a_request_that_would_do_nothing_is_refused_naming_the_option(args: list[str], tmp_path: Path) -> None:
    result = runner.invoke(app, [*args, "--state-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "--count must be at least 1 (got 0)" in result.output


def test_options_come_from_the_environment(tmp_path: Path) -> None:
    # ERU_STATE_DIR reaches every verb; ERU_<VERB>_<OPTION> any other option (here deploy's --count)
    env = {"ERU_STATE_DIR": str(tmp_path / "nowhere"), "ERU_DEPLOY_COUNT": "0"}
    result = runner.invoke(app, ["deploy", "--pod", "p", "--image", "busybox"], env=env)
    assert result.exit_code == 2
    assert "--count must be at least 1" in result.output
    result = runner.invoke(app, ["node", "ls"], env={"ERU_STATE_DIR": str(tmp_path / "nowhere")})
    assert result.exit_code == 2
    assert f"no stack under {tmp_path / 'nowhere'}" in result.output


def test_status_document_per_service_with_restarts_and_metrics() -> None:
    replicas = [
        {"service": "allocator", "replica": "allocator-1", "version": "0.1.0", "ready": True, "requests": 2.0,
         "stats": {"pending": 3}, "metrics": "http://127.0.0.1:9101/metrics"},
        {"service": "allocator", "replica": "allocator-2", "version": "0.1.0", "ready": False, "requests": 0,
         "stats": {}, "metrics": None},
    ]  # fmt: skip
    doc = status_document(
        nats={"state": "up", "url": "nats://x", "detail": ""},
        postgres={"state": "up", "dsn": "postgresql://x", "version": "18", "detail": ""},
        replicas=replicas,
        restarts={"allocator-1": 2},
        console_url="http://127.0.0.1:8080/",
        metrics={"allocator-2": "http://127.0.0.1:9102/metrics"},
    )
    allocator = next(s for s in doc["services"] if s["name"] == "allocator")
    assert (allocator["state"], allocator["replicas"]) == ("starting", 2)
    first, second = allocator["instances"]
    assert (first["restarts"], first["metrics_url"], first["requests"]) == (2, "http://127.0.0.1:9101/metrics", 2)
    assert (second["restarts"], second["metrics_url"]) == (0, "http://127.0.0.1:9102/metrics")
    missing = next(s for s in doc["services"] if s["name"] == "eviction")
    assert (missing["state"], missing["replicas"], missing["instances"]) == ("missing", 0, [])
    assert doc["healthy"] is False
    assert doc["console_url"] == "http://127.0.0.1:8080/"
    no_supervisor = status_document(nats=doc["nats"], postgres=doc["postgres"], replicas=replicas)
    assert no_supervisor["services"][0]["instances"][0]["restarts"] is None  # unknown, not a made-up 0


def test_observability_files_name_every_replica_port(tmp_path: Path) -> None:
    info = StackInfo(
        state_dir=str(tmp_path),
        nats_url="nats://127.0.0.1:1",
        database_dsn="postgresql://x",
        supervisor_pid=1,
        embedded_nats=True,
        embedded_postgres=True,
        metrics={"allocator": "http://127.0.0.1:9101/metrics", "node-agent-sim": "http://127.0.0.1:9104/metrics"},
    )
    config = yaml.safe_load(scrape_config(info))
    targets = config["scrape_configs"][0]["static_configs"]
    assert [(t["targets"], t["labels"]["service"]) for t in targets] == [
        (["127.0.0.1:9101"], "allocator"),
        (["127.0.0.1:9104"], "node-agent"),
    ]
    board = dashboard()
    assert {panel["gridPos"]["w"] for panel in board["panels"]} == {12}
    assert all(
        "eru_" in panel["targets"][0]["expr"] or "up{" in panel["targets"][0]["expr"] for panel in board["panels"]
    )
    written = write_observability(tmp_path / "obs", info)
    assert [path.name for path in written] == ["prometheus.yml", "grafana-dashboard.json"]
    assert json.loads(written[1].read_text())["uid"] == "eru-overview"
    assert service_of("node-agent-docker") == "node-agent"


def test_explain_document_of_a_deploy_and_of_another_kind() -> None:
    from eru.cli.explain_commands import _numbers, explanation

    problem = {
        "kind": "deploy",
        "mode": "auto",
        "count": 1,
        "request": {"cpu_bind": True, "cpu_request": 2, "memory_request": "1GiB"},
        "nodes": [
            {"name": "big", "cpu_map": {str(c): 100 for c in range(4)}, "memory": "8GiB"},
            {"name": "small", "cpu_map": {"0": 100}, "memory": "8GiB"},
        ],
    }
    row = {"id": "d1", "kind": "deploy", "input": json.dumps(problem), "output": {"deploy": {"big": 1}}}
    doc = explanation(row)
    assert (doc["schema"], doc["explained"], doc["count"]) == ("eru.cli/explain", True, 1)
    assert [entry["node"] for entry in doc["placed"]] == ["big"]
    [small] = doc["not_chosen"]
    assert small["numbers"]["limited_by"] == "cpu"
    assert "free cores 1" in _numbers(small["numbers"])
    other = explanation({"id": "a1", "kind": "admission", "input": "{}", "output": {"waiting": ["x"]}})
    assert (other["explained"], other["output"]) == (False, {"waiting": ["x"]})
