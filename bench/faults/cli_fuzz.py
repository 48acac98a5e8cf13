"""The CLI fuzz (docs/cli.md "Limits"): every verb that takes text or a file, run as a process against the suite's
stack with one value no one can write: bytes that are not UTF-8 in an argument (Python reads them as lone
surrogates), a string far above any limit, a problem or trace file holding lone `\\ud800` escapes, bytes that are not
UTF-8 or overlong strings (bad_strings.py). Seeded: the same seed runs the same cases.

What must hold for each: exit code 2 (invalid input in docs/cli.md "Exit codes": not 1 refused, 3 unavailable — no
answer in time — or 4 not found, since a value no one can write names nothing), one line on stderr `error: FIELD:
reason` naming the option or argument typed, no traceback. Other values name only `fuzz-*` things, so a refusal that
fails to happen changes nothing of the stack's.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.faults.bad_strings import RAW, encode, spoil

SLOT = "@"  # where the bad value goes
TEXT: list[tuple[list[str], tuple[str, ...]]] = [  # (arguments, the names the error may give the slot)
    (["deploy", "--pod", "fuzz-pod", "--image", "busybox", "--no-wait", "--name", SLOT], ("--name",)),
    (["deploy", "--pod", "fuzz-pod", "--no-wait", "--image", SLOT], ("--image",)),
    (["deploy", "--image", "busybox", "--no-wait", "--pod", SLOT], ("--pod",)),
    (["deploy", "--pod", "fuzz-pod", "--image", "busybox", "--no-wait", "--tenant", SLOT], ("--tenant",)),
    (["deploy", "--pod", "fuzz-pod", "--image", "busybox", "--no-wait", "--command", SLOT], ("--command",)),
    (["deploy", "--pod", "fuzz-pod", "--image", "busybox", "--no-wait", "--request-id", SLOT], ("--request-id",)),
    (["deploy", "--pod", "fuzz-pod", "--image", "busybox", "--no-wait", "--memory", SLOT], ("--memory",)),
    (["deploy", "--pod", "fuzz-pod", "--image", "busybox", "--no-wait", "--class", SLOT], ("--class",)),
    (["deploy", "--pod", "fuzz-pod", "--image", "busybox", "--no-wait", "--mode", SLOT], ("--mode",)),
    (["deploy", "--pod", "fuzz-pod", "--image", "busybox", "--no-wait", "--max-unavailable", SLOT], ("--max-",)),
    (["deploy", "status", SLOT], ("deploy_id", "DEPLOY_ID", "argument 3")),
    (["container", "replace", "fuzz-c", "--image", SLOT], ("--image",)),
    (["container", "replace", "fuzz-c", "--image", "busybox", "--command", SLOT], ("--command",)),
    (["container", "replace", SLOT, "--image", "busybox"], ("container_id", "CONTAINER_ID", "argument 3")),
    (["container", "rm", "fuzz-c", "--reason", SLOT], ("--reason",)),
    (["tenant", "create", SLOT], ("name", "NAME", "argument 3")),
    (["tenant", "create", "fuzz-t", "--quota", SLOT], ("--quota",)),
    (["tenant", "create", "fuzz-t", "--limit", SLOT], ("--limit",)),
    (["tenant", "create", "fuzz-t", "--weight", SLOT], ("--weight",)),
    (["tenant", "set", SLOT, "--weight", "2"], ("name", "NAME", "argument 3")),
    (["node", "set", "fuzz-node", "--watermark", SLOT], ("--watermark",)),
    (["node", "set", SLOT, "--memory", "1GiB"], ("name", "NAME", "node", "argument 3")),
    (["node", "set", "fuzz-node", "--memory", SLOT], ("--memory",)),
    (["node", "add", SLOT, "--pod", "fuzz-pod", "--cpus", "1"], ("name", "NAME", "node", "argument 3")),
    (["node", "add", "fuzz-node", "--pod", "fuzz-pod", "--cpu-map", SLOT], ("--cpu-map",)),
    (["node", "cordon", SLOT], ("name", "NAME", "node", "argument 3")),
    (["pod", "set", SLOT, "--watermark", "cpu_evict=80"], ("name", "NAME", "pod", "argument 3")),
    (["pod", "set", "fuzz-pod", "--watermark", SLOT], ("--watermark",)),
    (["explain", SLOT], ("decision_id", "DECISION_ID", "argument 2")),
    (["replay", SLOT], ("ID", "argument 2")),
]
PLAN = {  # a valid `eru plan` problem (docs/planning.md), spoiled before each run
    "mode": "auto",
    "count": 2,
    "request": {"cpu_bind": False, "cpu_request": 0.5, "memory_request": "64MiB"},
    "nodes": [{"name": "fuzz-a", "cpu_map": {"0": 100, "1": 100}, "memory": 1 << 30}],
}
# --trace recorded: a trace holds numbers only, so its strings stand where numbers are read (the interval, a series'
# share): each spoiled one must be refused naming its field. (An ignored `note` string let the run pass with exit 0.)
TRACE = {"interval_seconds": "60", "nodes": [[0.2, 0.5, 0.3], ["0.4"]]}
ONE_LINE = re.compile(r"^error: (.+?): .+")  # the field may be `argument 3 'fuzz-…'`
TIMEOUT_SECONDS = 120.0  # a guard against a hang, not a measurement


def _argument(style: str, rng: random.Random) -> bytes:
    """A bad command-line value: bytes that are not UTF-8, or text far above any limit (exec takes 128 KiB)."""
    if style == "bytes":
        return b"fuzz-" + rng.choice(RAW) + b"x" * rng.randint(0, 3)
    return b"fuzz-" + b"x" * rng.choice((100_000, 120_000))  # above every limit (64 KiB: a command, the env)


def cases(seed: int, total: int) -> list[tuple[str, list[bytes], tuple[str, ...], bytes | None]]:
    """`total` cases: (label, arguments, accepted field names, file content or None); `{file}` in the arguments
    stands for the file written with the content."""
    rng = random.Random(seed)
    out: list[tuple[str, list[bytes], tuple[str, ...], bytes | None]] = []
    for index in range(total):
        which = index % (len(TEXT) + 3)
        if which < len(TEXT):
            args, names = TEXT[which]
            style = rng.choice(("bytes", "overlong"))
            value = _argument(style, rng)
            argv = [value if a == SLOT else a.encode() for a in args]
            out.append((f"{' '.join(a for a in args if a != SLOT)} <{style}>", argv, names, None))
            continue
        style = rng.choice(("escape", "raw_json", "overlong"))
        if which == len(TEXT):
            content, _ = encode(spoil(json.loads(json.dumps(PLAN)), style, rng), style, rng)
            out.append((f"plan FILE <{style}>", [b"plan", b"{file}"], (), content))
        elif which == len(TEXT) + 1:
            content, _ = encode(spoil(json.loads(json.dumps(TRACE)), style, rng, share=0.9), style, rng)
            argv = [b"sim", b"colocation", b"--trace", b"recorded", b"--hours", b"0.1", b"--trace-file", b"{file}"]
            out.append((f"sim colocation --trace-file <{style}>", argv, (), content))
        else:  # the file's own name not UTF-8
            name = b"fuzz-" + rng.choice(RAW) + b".json"
            out.append(("plan <a file name not UTF-8>", [b"plan", name], ("argument 2",), None))
    return out


def judge(done: subprocess.CompletedProcess[bytes], names: tuple[str, ...]) -> str | None:
    """Why a run breaks the rule (exit 2, one line naming the field, no traceback), or None when it holds."""
    err = done.stderr.decode(errors="replace")
    if b"Traceback" in done.stderr + done.stdout:
        return f"traceback: {err.strip().splitlines()[-1][:200] if err.strip() else ''}"
    if done.returncode != 2:
        return f"exit {done.returncode}: {err.strip()[:200] or done.stdout.decode(errors='replace')[:200]}"
    if err.count("\n") != 1 or len(err) > 1200:
        return f"{err.count(chr(10))} lines, {len(err)} characters: {err[:200]}"
    found = ONE_LINE.match(err.strip())
    if found is None:
        return f"not `error: FIELD: reason`: {err.strip()[:200]}"
    if names and not any(found.group(1).startswith(name) for name in names):
        return f"names {found.group(1)!r}, not {' or '.join(names)}: {err.strip()[:200]}"
    return None


def cli_fuzz(state_dir: Path, total: int, seed: int = 13) -> dict[str, Any]:
    """Run `total` seeded CLI cases against the stack in `state_dir`; count those that break the rule."""
    started = time.monotonic()
    env = {**os.environ, "ERU_STATE_DIR": str(state_dir), "COLUMNS": "200", "ERU_TIMEOUT": "5"}
    failures: list[str] = []
    by_verb: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="eru-cli-fuzz-") as work:
        for index, (label, argv, names, content) in enumerate(cases(seed, total)):
            verb = label.split(" <", 1)[0]
            by_verb[verb] = by_verb.get(verb, 0) + 1
            path = os.path.join(work.encode(), f"case-{index}.json".encode())
            if content is not None:
                Path(os.fsdecode(path)).write_bytes(content)
            command = [sys.executable.encode(), b"-m", b"eru.cli", *(path if a == b"{file}" else a for a in argv)]
            try:
                done = subprocess.run(command, capture_output=True, env=env, timeout=TIMEOUT_SECONDS, cwd=work)
            except subprocess.TimeoutExpired:
                failures.append(f"{label}: no answer within {TIMEOUT_SECONDS:g}s")
                continue
            why = judge(done, names)
            if why is not None:
                failures.append(f"{label}: {why}")
    return {
        "sent": total,
        "cli_failures": len(failures),  # the target is 0
        "cli_failure_examples": failures[:10],
        "by_verb": by_verb,
        "seconds": round(time.monotonic() - started, 1),
    }
