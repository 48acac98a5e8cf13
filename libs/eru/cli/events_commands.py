"""`eru events tail | replay | show`: what the bus recorded, for debugging (SPEC §9, docs/replay.md)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from eru.bus.history import ALL_STREAMS, STORY_STREAMS, RecordedMessage, Selection, read_history, read_stream
from eru.cli.app import app
from eru.errors import EruError, InvalidInput
from eru.stack import StackInfo

events_app = typer.Typer(name="events", help="Show what the bus recorded: tail, replay a range, a deploy's story.")
app.add_typer(events_app)

console = Console()
err_console = Console(stderr=True)

StateDir = Annotated[Path, typer.Option("--state-dir", help="The stack whose NATS server to read (stack.json).")]
NatsUrl = Annotated[str | None, typer.Option("--nats", help="NATS URL (default: the running stack's).")]
AsJson = Annotated[bool, typer.Option("--json", help="One JSON object per line instead of a table.")]
Deploy = Annotated[str | None, typer.Option("--deploy", help="Only this deploy (its correlation id).")]
Node = Annotated[str | None, typer.Option("--node", help="Only messages about this node.")]
Type = Annotated[str | None, typer.Option("--type", help="Only these types (ce-type, glob: 'eru.deploy.*').")]
Stream = Annotated[list[str] | None, typer.Option("--stream", help="Streams to read (repeatable).")]

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_when(value: str, field: str, now: datetime) -> datetime:
    """`10m`, `2h`, `1d`, `30s` ago, or an ISO 8601 time (UTC when no zone is given)."""
    match = _DURATION.match(value.strip())
    if match:
        return now - timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[match.group(2)])
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidInput(field, f"{value!r} is neither a duration (30s, 10m, 2h, 1d) nor an ISO 8601 time") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _fail(message: str, code: int = 2) -> None:
    err_console.print(f"[bold red]error:[/] {message}", highlight=False)
    raise typer.Exit(code)


def _nats_url(state_dir: Path, nats: str | None) -> str:
    if nats:
        return nats
    info = StackInfo.load(state_dir)
    if info is None:
        _fail(f"no stack under {state_dir}: start one with `eru up`, or pass --nats")
        raise AssertionError("unreachable")
    return info.nats_url


def _streams(chosen: list[str] | None, default: Iterable[str]) -> list[str]:
    if not chosen:
        return list(default)
    unknown = [s for s in chosen if s not in ALL_STREAMS]
    if unknown:
        raise InvalidInput("stream", f"unknown stream {unknown[0]!r} (known: {', '.join(ALL_STREAMS)})")
    return chosen


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _short(value: Any) -> Any:
    return f"{value[:8]}…" if isinstance(value, str) and _UUID.match(value) else value


def _summary(body: Any, width: int = 70) -> str:
    if isinstance(body, dict):
        shown = {k: v for k, v in body.items() if v not in (None, "", [], {}) and k != "spec"}
        text = ", ".join(f"{k}={_short(v)}" for k, v in shown.items())
    else:
        text = str(body)
    return text if len(text) <= width else text[: width - 1] + "…"


def _print(messages: list[RecordedMessage], as_json: bool, title: str) -> None:
    if as_json:
        for message in messages:
            print(json.dumps(message.to_json(), default=str))
        return
    console.rule(title)
    for message in messages:
        console.print(_line(message), highlight=False, markup=False, overflow="ellipsis", no_wrap=True)


async def _history(
    url: str,
    streams: list[str],
    selection: Selection,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    from_seq: int | None = None,
) -> list[RecordedMessage]:
    from eru.bus.connection import connect

    nc = await connect(url, name="eru-events", connect_timeout=3)
    try:
        js = nc.jetstream()
        if from_seq is None:
            return await read_history(js, streams, selection, since=since, until=until)
        stored = read_stream(js, streams[0], from_sequence=from_seq, until=until)
        return [message async for message in stored if selection.matches(message)]
    finally:
        await nc.close()


@events_app.command("replay")
def replay_range(
    since: Annotated[str | None, typer.Option(help="From this long ago (10m) or this time (ISO 8601).")] = None,
    until: Annotated[str | None, typer.Option(help="Up to this long ago or this time.")] = None,
    from_seq: Annotated[int | None, typer.Option("--from-seq", help="From this stream sequence (one stream).")] = None,
    stream: Stream = None,
    deploy: Deploy = None,
    node: Node = None,
    type_: Type = None,
    as_json: AsJson = False,
    state_dir: StateDir = Path(".state"),
    nats: NatsUrl = None,
) -> None:
    """Recorded messages of a time range (or from a sequence), oldest first."""
    try:
        now = datetime.now(UTC)
        since_at = parse_when(since, "since", now) if since else None
        until_at = parse_when(until, "until", now) if until else None
        streams = _streams(stream, STORY_STREAMS)
        if from_seq is not None and len(streams) != 1:
            raise InvalidInput("from_seq", "a sequence belongs to one stream: give exactly one --stream")
        selection = Selection(deploy=deploy, node=node, type_pattern=type_)
        url = _nats_url(state_dir, nats)
        messages = asyncio.run(_history(url, streams, selection, since=since_at, until=until_at, from_seq=from_seq))
    except EruError as error:
        _fail(error.message, 2 if isinstance(error, InvalidInput) else 3)
        return
    _print(messages, as_json, f"{len(messages)} recorded messages")


@events_app.command("show")
def show(
    what: Annotated[str, typer.Argument(help="A deploy id or a node name.")],
    as_json: AsJson = False,
    state_dir: StateDir = Path(".state"),
    nats: NatsUrl = None,
) -> None:
    """The whole recorded story of a deploy or a node, in order."""
    try:
        url = _nats_url(state_dir, nats)
        by_deploy = asyncio.run(_history(url, list(STORY_STREAMS), Selection(deploy=what)))
        messages = by_deploy or asyncio.run(_history(url, list(STORY_STREAMS), Selection(node=what)))
    except EruError as error:
        _fail(error.message, 3)
        return
    if not messages:
        _fail(f"nothing recorded about {what!r} (neither a deploy id nor a node name in the retained history)", 1)
    _print(messages, as_json, f"the story of {what}")


@events_app.command("tail")
def tail(
    subject: Annotated[str | None, typer.Option(help="NATS subject filter, e.g. 'eru.container.node-1.*'.")] = None,
    stream: Stream = None,
    deploy: Deploy = None,
    node: Node = None,
    type_: Type = None,
    as_json: AsJson = False,
    state_dir: StateDir = Path(".state"),
    nats: NatsUrl = None,
) -> None:
    """Live messages as they are stored, until Ctrl-C."""
    try:
        streams = _streams(stream, STORY_STREAMS)
        selection = Selection(deploy=deploy, node=node, type_pattern=type_)
        asyncio.run(_tail(_nats_url(state_dir, nats), streams, subject, selection, as_json))
    except EruError as error:
        _fail(error.message, 2 if isinstance(error, InvalidInput) else 3)
    except KeyboardInterrupt:
        pass


async def _tail(url: str, streams: list[str], subject: str | None, selection: Selection, as_json: bool) -> None:
    from eru.bus.connection import connect
    from eru.bus.streams import default_streams

    nc = await connect(url, name="eru-events-tail", connect_timeout=3)
    js = nc.jetstream()
    specs = {spec.name: spec.subjects for spec in default_streams()}
    queue: asyncio.Queue[RecordedMessage] = asyncio.Queue()

    async def follow(stream: str) -> None:
        async for message in read_stream(js, stream, subject_filter=subject, live=True):
            await queue.put(message)

    # A subject filter names one family: follow only the streams that can hold it.
    chosen = [s for s in streams if subject is None or any(_may_overlap(subject, p) for p in specs.get(s, ()))]
    followers = [asyncio.create_task(follow(stream)) for stream in chosen]
    try:
        while True:
            message = await queue.get()
            if not selection.matches(message):
                continue
            if as_json:
                print(json.dumps(message.to_json(), default=str), flush=True)
            else:
                console.print(_line(message), highlight=False, markup=False)
    finally:
        for follower in followers:
            follower.cancel()
        await nc.close()


def _line(message: RecordedMessage) -> str:
    where = f"{message.stream.removeprefix('ERU_')}:{message.sequence}"
    stored = message.stored_at.strftime("%H:%M:%S.%f")[:-3]
    return f"{stored} {where:<10} {message.subject}  {_summary(message.body, 200)}"


def _may_overlap(a: str, b: str) -> bool:
    """Whether two subject filters can match a common subject (token by token, `*` and `>` as wildcards)."""
    left, right = a.split("."), b.split(".")
    for x, y in zip(left, right, strict=False):
        if ">" in (x, y):
            return True
        if x != y and "*" not in (x, y):
            return False
    return len(left) == len(right)
