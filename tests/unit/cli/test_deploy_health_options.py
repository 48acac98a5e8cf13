"""`eru deploy --health-cmd CMD --health-interval 5s --health-retries 3` (docs/cli.md): the workload's health check,
refused in one line naming the option the user typed."""

from __future__ import annotations

from typing import Any

import pytest
import typer

from eru.cli.deploy_request import deploy_request
from eru.errors import InvalidInput
from eru.units import parse_seconds

BASE: dict[str, Any] = {
    "pod": "p1",
    "image": "busybox",
    "name": None,
    "count": 1,
    "cpu": 0.0,
    "cpu_limit": 0.0,
    "cpu_bind": False,
    "memory": "0",
    "memory_limit": "0",
    "mode": "auto",
    "nodes_limit": 0,
    "priority_class": "prod",
    "tenant": "default",
    "command": None,
    "request_id": None,
    "wait_seconds": 0.0,
}


@pytest.mark.parametrize(("text", "seconds"), [("5", 5.0), ("5s", 5.0), ("500ms", 0.5), ("1.5m", 90.0), ("1h", 3600.0)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_seconds(text, "--health-interval") == seconds


def test_a_duration_that_is_none_is_refused_naming_the_option() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_seconds("soon", "--health-interval")
    assert caught.value.field == "--health-interval"


def test_the_health_options_make_the_workloads_check() -> None:
    fields = {**BASE, "health_cmd": "wget -q 'http://localhost/ready'", "health_interval": "2s", "health_retries": 4}
    workload = deploy_request(**fields).workload
    assert workload.health_command == ["wget", "-q", "http://localhost/ready"]
    assert (workload.health_interval_seconds, workload.health_retries) == (2.0, 4)
    plain = deploy_request(**BASE).workload
    assert (plain.health_command, plain.health_interval_seconds, plain.health_retries) == ([], 5.0, 3)


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"health_interval": "soon"}, "--health-interval: cannot read 'soon' as a duration"),
        ({"health_retries": 0}, "--health-retries: "),
        ({"health_cmd": "sh -c 'unclosed"}, "--health-cmd: No closing quotation"),
    ],
)
def test_a_bad_health_option_is_refused_naming_it(
    options: dict[str, Any], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(typer.Exit) as caught:
        deploy_request(**{**BASE, "health_cmd": "true", **options})
    assert caught.value.exit_code == 2
    assert said in capsys.readouterr().err
