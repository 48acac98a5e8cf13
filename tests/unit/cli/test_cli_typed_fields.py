"""What `eru` can check alone it refuses before sending, naming the option or argument as typed (exit 2, one line);
what a service refuses is named as typed too (docs/cli.md "Limits").

Before the fix `--mode`, `--max-unavailable`, `--weight`, `--reason` and ids of 100,000 characters were sent to the
allocator, which answered nothing within the CLI's 5 s (its redaction of the refusal's log line took 28 s); its
refusals came back naming the model's field (`weight: expected a number`, `mode: unknown placement mode`), and
`eru replay` of an overlong id looked it up and said `nothing recorded under 'fuzz-xxx…'` naming no argument."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from eru.bus.errors import RemoteError
from eru.cli.failure import CliError, Kind, as_typed, option_of, typed_as

UNREACHABLE = "nats://127.0.0.1:9"  # nothing may be sent: the input is refused before connecting
TIMEOUT = 60  # a guard against a hang, not a measurement
LONG = "fuzz-" + "x" * 100_000

LOCAL: list[tuple[list[str], str]] = [
    (["deploy", "--pod", "p", "--image", "busybox", "--mode", LONG], "--mode: unknown placement mode"),
    (["deploy", "--pod", "p", "--image", "busybox", "--mode", "fil"], "--mode: unknown placement mode 'fil'"),
    (["deploy", "--pod", "p", "--image", "busybox", "--max-unavailable", LONG], "--max-unavailable: expected a"),
    (["deploy", "--pod", "p", "--image", "busybox", "--max-unavailable", "1" * 5000], "--max-unavailable: expected"),
    (["deploy", "--pod", "p", "--image", "busybox", "--max-unavailable", "120%"], "--max-unavailable: percentage"),
    (["container", "replace", LONG, "--image", "busybox"], "CONTAINER_ID: an id is 100,005 characters"),
    (["container", "rm", "c1", "--reason", LONG], "--reason: the text is 100,005 characters"),
    (["container", "rm", LONG], "CONTAINER_IDS: an id is 100,005 characters"),
    (["container", "realloc", "c1", "--memory", "lots"], "--memory: "),
    (["tenant", "create", "t", "--weight", LONG], "--weight: expected a number"),
    (["tenant", "set", "t", "--weight", "-2"], "--weight: must be > 0"),
    (["tenant", "create", "t", "--quota", "gpu=1"], "--quota: unknown resource"),
    (["deploy", "status", LONG], "DEPLOY_ID: 100,005 characters"),
    (["explain", LONG], "DECISION_ID: an id is 100,005 characters"),
    (["replay", LONG], "ID: an id is 100,005 characters"),
    (["replay", "not an id"], "ID: 'not an id' is not an id"),
]


@pytest.mark.parametrize(("args", "start"), LOCAL, ids=[f"{a[0]} {a[-2][:20]}" for a, _ in LOCAL])
def test_what_the_cli_can_check_is_refused_before_sending_naming_the_option(args: list[str], start: str) -> None:
    env = {**os.environ, "COLUMNS": "200", "ERU_TIMEOUT": "5", "ERU_BUS_URL": UNREACHABLE, "ERU_STATE_DIR": "/none"}
    done = subprocess.run(
        [sys.executable, "-m", "eru.cli", *args], capture_output=True, env=env, timeout=TIMEOUT, check=False
    )
    err = done.stderr.decode()
    assert b"Traceback" not in done.stderr + done.stdout, err[-2000:]
    assert done.returncode == 2, err[:500]
    assert err.count("\n") == 1, err[:600]
    assert len(err) < 600, err[:600]
    assert err.startswith(f"error: {start}"), err[:600]


@pytest.fixture
def untyped() -> Iterator[None]:
    yield
    typed_as({})  # the mapping is the running verb's: none for the tests after this one


@pytest.mark.usefixtures("untyped")
def test_a_service_refusal_names_the_option_the_field_came_from() -> None:
    typed_as({"weight": "--weight", "container_ids": "CONTAINER_IDS", "workload.eviction_budget": "--max-unavailable"})
    weight = CliError.of(RemoteError("invalid_input", "weight: expected a number, got 'x'", {"field": "weight"}))
    assert (weight.message, weight.field, weight.kind) == (
        "--weight: expected a number, got 'x'",
        "--weight",
        Kind.invalid_input,
    )
    missing = CliError.of(
        RemoteError("not_found", "container_ids[1]: unknown container 'c'", {"field": "container_ids[1]"})
    )
    assert (missing.message, missing.kind) == ("CONTAINER_IDS: unknown container 'c'", Kind.not_found)
    nested = "workload.eviction_budget.max_unavailable"
    budget = CliError.of(RemoteError("invalid_input", f"{nested}: must not be negative", {"field": nested}))
    assert budget.message == "--max-unavailable: must not be negative"
    other = CliError.of(RemoteError("invalid_input", "pod: unknown pod 'p'", {"field": "pod"}))
    assert other.message == "pod: unknown pod 'p'"  # no option maps it: as the service said


def test_option_of_takes_the_longest_mapped_prefix_and_lists_by_their_name() -> None:
    options = {"workload": "--workload", "workload.command": "--command", "container_ids": "CONTAINER_IDS"}
    assert option_of("workload.command[2]", options) == "--command"
    assert option_of("workload.image", options) == "--workload"
    assert option_of("container_ids.0", options) == "CONTAINER_IDS"  # pydantic's location of a list item
    assert option_of("count", options) is None
    assert as_typed("mode: unknown", "mode", {"mode": "--mode"}) == ("--mode: unknown", "--mode")
    assert as_typed("unknown mode", "mode", {"mode": "--mode"}) == ("--mode: unknown mode", "--mode")
