"""`eru logs SERVICE [-f]`: the log files of a stack started by `eru up` (stack.json `logs`), like `docker logs`.

SERVICE is a service (`allocator`, `node-agent` — every process of that service), a process as `eru up` names it
(`node-agent-sim`), or `supervisor`. After a process's log lines come those of its output file (`<name>.out`,
prefixed `<name>.out | `): what it printed outside logging, such as a traceback of a crash at start or a bad
setting. `-f` follows the files as they grow (and from the start again when one is rotated or truncated) until
Ctrl-C, which exits 130 (docs/cli.md). Without a stack.json (a stack that stopped) the files under `<state-dir>/logs`
are read.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from eru.cli.app import app
from eru.cli.bus_client import DEFAULT_STATE_DIR, StateDirOption, fail
from eru.cli.output import Format, OutputOption, document, emit_line

POLL_SECONDS = 0.2


def log_files(logs: dict[str, str], state_dir: Path, service: str) -> dict[str, Path]:
    """The files of `service`: a process name exactly, else every process of that service, else the supervisor's;
    an unknown name is an error listing the known ones."""
    known = dict(logs)
    supervisor = state_dir / "logs" / "supervisor.log"
    if supervisor.exists():
        known.setdefault("supervisor", str(supervisor))
    if service in known:
        return {service: Path(known[service])}
    from eru.observability import service_of

    chosen = {name: Path(path) for name, path in known.items() if service_of(name) == service}
    if not chosen:
        names = ", ".join(sorted({*known, *(service_of(name) for name in known)}))
        fail(f"no logs of {service!r} under {state_dir} (known: {names or 'none'})", code=2)
    return chosen


def left_logs(state_dir: Path) -> dict[str, str]:
    """The log files under `<state_dir>/logs` by process name, for a stack that left no stack.json (one that stopped,
    or whose start failed)."""
    directory = state_dir / "logs"
    found = sorted(directory.glob("*.log")) if directory.is_dir() else []
    return {path.stem: str(path) for path in found if path.stem != "supervisor"}


def last_lines(path: Path, count: int) -> tuple[list[bytes], int]:
    """The last `count` lines of a file and the offset just after them (reads at most the last 1 MiB)."""
    with path.open("rb") as handle:
        end = handle.seek(0, 2)
        start = max(0, end - (1 << 20))
        handle.seek(start)
        data = handle.read()
    lines = data.splitlines(keepends=True)
    if start > 0 and lines:
        lines = lines[1:]  # the first one may be cut
    return (lines[-count:] if count > 0 else []), end


def _write(prefix: str, line: bytes, fmt: Format = Format.text, process: str = "") -> None:
    if fmt is not Format.text:  # one `eru.cli/log` document per line: the process and its JSON entry
        emit_line(log_document(process, line), fmt)
        return
    out = sys.stdout.buffer
    out.write(prefix.encode() + line if prefix else line)
    if not line.endswith(b"\n"):
        out.write(b"\n")


def log_document(process: str, line: bytes) -> dict[str, object]:
    """`{"schema": "eru.cli/log", …, "process", "entry"}`: the entry decoded when it is JSON, else its text."""
    import json

    text = line.decode("utf-8", errors="replace").rstrip("\n")
    try:
        entry: object = json.loads(text)
    except ValueError:
        entry = text
    return document("log", process=process, entry=entry)


@app.command()
def logs(
    service: Annotated[
        str,
        typer.Argument(
            metavar="SERVICE",
            help="allocator, distributor, eviction, node-agent, a process (node-agent-sim) or supervisor.",
        ),
    ],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until Ctrl-C.")] = False,
    tail: Annotated[int, typer.Option("--tail", "-n", help="Lines of each file to show first (0: none).", min=0)] = 50,
    output: OutputOption = Format.text,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
) -> None:
    """Show a service's log lines (JSON lines, one event each) from the stack's log files; -f follows them. With -o
    json each line is an `eru.cli/log` document naming its process (-o yaml: one YAML document each)."""
    from eru.stack.info import StackInfo

    info = StackInfo.load(state_dir)
    known = info.logs if info is not None else left_logs(state_dir)
    if info is None and not (state_dir / "logs").is_dir():
        fail(f"no stack under {state_dir}: logs live in <state-dir>/logs of a stack started by `eru up`", code=2)
    logs_of = log_files(known, state_dir, service)
    prefixes = {name: (f"{name} | " if len(logs_of) > 1 else "") for name in logs_of}
    # each process's output file after its log: a crash at start is only there (docs/operations.md "Logs")
    outputs = {f"{name}.out": path.with_suffix(".out") for name, path in logs_of.items() if path.suffix == ".log"}
    prefixes |= {name: f"{name} | " for name in outputs}
    files = {**logs_of, **outputs}
    offsets: dict[str, int] = {}
    for name, path in files.items():
        lines, offsets[name] = last_lines(path, tail) if path.exists() else ([], 0)
        for line in lines:
            _write(prefixes[name], line, output, name)
    sys.stdout.flush()
    if not follow:
        return
    handles: dict[str, BinaryIO] = {}
    partial: dict[str, bytes] = {name: b"" for name in files}
    try:
        while True:
            for name, path in files.items():
                _follow_one(name, path, handles, offsets, partial, prefixes[name], output)
            sys.stdout.flush()
            time.sleep(POLL_SECONDS)
    finally:
        for handle in handles.values():
            handle.close()


def _follow_one(
    name: str,
    path: Path,
    handles: dict[str, BinaryIO],
    offsets: dict[str, int],
    partial: dict[str, bytes],
    prefix: str,
    fmt: Format = Format.text,
) -> None:
    """Print what was appended to `path` since `offsets[name]`; start over when the file shrank or was replaced."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return
    size = stat.st_size
    handle = handles.get(name)
    replaced = handle is not None and os.fstat(handle.fileno()).st_ino != stat.st_ino
    if handle is None or replaced or size < offsets[name]:  # first time, rotated or truncated
        if handle is not None:
            handle.close()
            offsets[name] = 0  # a new file: from its start
            partial[name] = b""
        handle = handles[name] = path.open("rb")
    if size == offsets[name]:
        return
    handle.seek(offsets[name])
    data = partial[name] + handle.read(size - offsets[name])
    offsets[name] = size
    lines = data.split(b"\n")
    partial[name] = lines.pop()  # an unfinished last line waits for its end
    for line in lines:
        _write(prefix, line + b"\n", fmt, name)
