"""Long and non-text input to `eru` (docs/cli.md "Limits"): refused in one short line naming the option the user
typed, exit 2, never a traceback, never a hang.

Before the fix a 120 KB `--image` was accepted by the model but blamed on `workload.name` (derived from it) and the
CLI took minutes to print the 120 KB value back; `--image busybox` + 300 x was refused naming `workload.name`; a 2 MB
`--name` echoed 2 MB; an undecodable byte in an option ended in a traceback for the verbs that build a model."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest

UNREACHABLE = "nats://127.0.0.1:9"  # nothing may be sent: the input is refused before connecting
TIMEOUT = 60  # a guard against the old hang, not a measurement


def eru(*args: str | bytes, code: str | None = None) -> subprocess.CompletedProcess[bytes]:
    """`eru ARGS` as a process (or `code` run in one, for arguments longer than exec allows)."""
    env = {**os.environ, "COLUMNS": "200"}
    command: list[str | bytes] = [sys.executable, "-c", code] if code else [sys.executable, "-m", "eru.cli", *args]
    return subprocess.run(command, capture_output=True, env=env, timeout=TIMEOUT)


def one_line(done: subprocess.CompletedProcess[bytes]) -> str:
    err = done.stderr.decode()
    assert b"Traceback" not in done.stderr + done.stdout, err[-2000:]
    assert err.count("\n") == 1, err[:2000]
    assert len(err) < 600, err[:2000]
    return err


def in_process(*args: str, big: str) -> str:
    """A program running `eru ARGS` with `big` appended (in-process: exec takes at most 128 KiB per argument)."""
    return f"import sys\nfrom eru.cli.app import main\nsys.argv = ['eru', *{list(args)!r}, {big}]\nmain()\n"


def test_a_120_kb_image_is_refused_naming_image() -> None:
    done = eru(code=in_process("deploy", "--pod", "p", "--nats", UNREACHABLE, "--image", big="'x' * 120_000"))
    line = one_line(done)
    assert done.returncode == 2
    assert line.startswith("error: --image: "), line
    assert "120,000 characters" in line


def test_an_image_name_over_dockers_limit_is_blamed_on_image_not_the_derived_name() -> None:
    done = eru("deploy", "--pod", "p", "--image", "busybox" + "x" * 300, "--nats", UNREACHABLE)
    line = one_line(done)
    assert done.returncode == 2
    assert line.startswith("error: --image: the image name is 307 characters, above Docker's limit of 255"), line
    assert "workload.name" not in line


def test_a_2_mb_name_in_process_is_one_short_line() -> None:
    args = ("deploy", "--pod", "p", "--image", "busybox", "--nats", UNREACHABLE, "--name")
    done = eru(code=in_process(*args, big="'n' * 2_000_000"))
    line = one_line(done)
    assert done.returncode == 2
    assert line.startswith("error: --name: String should have at most 128 characters"), line
    assert "2,000,000 characters" in line


def test_a_derived_name_is_always_valid() -> None:
    from eru.cli.deploy_request import _name_of

    assert _name_of("registry.local:5000/team/web:1.2") == "web"
    assert _name_of("busybox" + "x" * 300) == ("busybox" + "x" * 300)[:128]
    assert _name_of("a.b__c") == "a-b__c"


# ---------- not UTF-8 text in any option of any verb ----------
TEXT_OPTIONS: list[tuple[list[str], str]] = [
    (["deploy", "--pod", "p", "--image", "busybox", "--pod"], "--pod"),
    (["deploy", "--pod", "p", "--image"], "--image"),
    (["deploy", "--pod", "p", "--image", "busybox", "--name"], "--name"),
    (["deploy", "--pod", "p", "--image", "busybox", "--tenant"], "--tenant"),
    (["deploy", "--pod", "p", "--image", "busybox", "--command"], "--command"),
    (["deploy", "--pod", "p", "--image", "busybox", "--request-id"], "--request-id"),
    (["deploy", "--pod", "p", "--image", "busybox", "--memory"], "--memory"),
    (["container", "replace", "c1", "--image"], "--image"),
    (["container", "replace", "c1", "--command"], "--command"),
    (["container", "ls", "--pod"], "--pod"),
    (["node", "cordon", "--nats", UNREACHABLE, "--state-dir"], "--state-dir"),
    (["tenant", "create", "t", "--quota"], "--quota"),
    (["events", "show", "--nats"], "--nats"),
    (["plan"], "argument 2"),
    (["explain"], "argument 2"),
]
BAD_BYTES = [b"\xff", b"\xed\xa0\x80", b"\xc3", b"\x80abc", b"ok\xfe"]


@pytest.mark.parametrize("seed", range(len(TEXT_OPTIONS)))
def test_every_verb_refuses_an_option_that_is_not_utf8_naming_it(seed: int) -> None:
    rng = random.Random(seed)
    args, option = TEXT_OPTIONS[seed]
    value = b"v" * rng.randint(0, 3) + rng.choice(BAD_BYTES) + b"w" * rng.randint(0, 3)
    done = eru(*[a.encode() for a in args], value, b"--nats", UNREACHABLE.encode())
    line = one_line(done)
    assert done.returncode == 2
    assert line.startswith(f"error: {option}"), line
    assert "not UTF-8 text" in line


def test_an_eru_variable_that_is_not_text_is_named() -> None:
    from eru.cli.app import unwritable_input

    assert unwritable_input(["deploy"], {"ERU_DEPLOY_IMAGE": "busy\udcff"}) == (
        "ERU_DEPLOY_IMAGE (environment): not UTF-8 text: a lone surrogate U+DCFF at character 4 "
        "(an undecodable byte 0xff)"
    )
    assert unwritable_input(["deploy", "--image=a\udcff"], {})
    assert unwritable_input(["deploy", "--image", "busybox"], {"PATH": "/bin", "ERU_X": "ok"}) is None


def test_a_model_a_verb_does_not_check_itself_is_still_one_line() -> None:
    done = eru("tenant", "create", "bad name!", "--nats", UNREACHABLE)
    line = one_line(done)
    assert done.returncode == 2
    assert line.startswith("error: NAME: String should match pattern"), line  # the argument as `--help` names it
