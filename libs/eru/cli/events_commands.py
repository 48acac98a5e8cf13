"""`eru events tail | replay | show`: what the bus recorded, for debugging (docs/replay.md, docs/cli.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from eru.cli.app import app, group
from eru.cli.bus_client import (
    DEFAULT_STATE_DIR,
    NatsOption,
    StateDirOption,
    console,
    fail,
    fail_with,
    nats_url,
    run_async,
)
from eru.cli.failure import Kind
from eru.cli.output import Format, JsonOption, OutputOption, chosen, document, emit, emit_line, render, to_plain
from eru.errors import EruError, InvalidInput

if TYPE_CHECKING:
    from eru.bus.history import RecordedMessage, Selection

events_app = group("Show what the bus recorded: tail, replay a range, a deploy's story.", name="events")
app.add_typer(events_app)

LinesJson = Annotated[bool, typer.Option("--json", help="Same as -o json: one JSON object per line (eru.cli/event).")]
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


def _streams(chosen_streams: list[str] | None, default: Iterable[str]) -> list[str]:
    from eru.bus.history import ALL_STREAMS

    if not chosen_streams:
        return list(default)
    unknown = [s for s in chosen_streams if s not in ALL_STREAMS]
    if unknown:
        raise InvalidInput("stream", f"unknown stream {unknown[0]!r} (known: {', '.join(ALL_STREAMS)})")
    return chosen_streams


_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _short(value: Any) -> str:
    if isinstance(value, str):
        return f"{value[:8]}…" if _UUID.match(value) else value
    return json.dumps(to_plain(value), ensure_ascii=False, separators=(",", ":"))


def _summary(body: Any, width: int = 70) -> str:
    """A body on one line: `key=value` pairs, values as JSON (never Python reprs), cut at `width`."""
    if isinstance(body, dict):
        shown = {k: v for k, v in body.items() if v not in (None, "", [], {}) and k != "spec"}
        text = ", ".join(f"{k}={_short(v)}" for k, v in shown.items())
    else:
        text = _short(body)
    return text if len(text) <= width else text[: width - 1] + "…"


def event_json(message: RecordedMessage) -> dict[str, Any]:
    """One recorded message in the `eru.cli/event` schema (docs/cli.md)."""
    return {"schema": "eru.cli/event", "schema_version": 1, **to_plain(message.to_json())}


def _print_lines(messages: list[RecordedMessage], fmt: Format, title: str) -> None:
    if fmt is not Format.text:  # one `eru.cli/event` per line (JSON) or per document (YAML)
        for message in messages:
            emit_line(event_json(message), fmt)
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
    from eru.bus.history import read_history, read_stream

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
    as_json: LinesJson = False,
    output: OutputOption = Format.text,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    nats: NatsOption = None,
) -> None:
    """Recorded messages of a time range (or from a sequence), oldest first."""
    from eru.bus.history import STORY_STREAMS, Selection

    try:
        now = datetime.now(UTC)
        since_at = parse_when(since, "since", now) if since else None
        until_at = parse_when(until, "until", now) if until else None
        streams = _streams(stream, STORY_STREAMS)
        if from_seq is not None and len(streams) != 1:
            raise InvalidInput("from_seq", "a sequence belongs to one stream: give exactly one --stream")
        selection = Selection(deploy=deploy, node=node, type_pattern=type_)
        url = nats_url(nats, state_dir)
        messages = run_async(_history(url, streams, selection, since=since_at, until=until_at, from_seq=from_seq))
    except EruError as error:
        fail_with(error)
    _print_lines(messages, chosen(output, as_json), f"{len(messages)} recorded messages")


async def _story(url: str, what: str) -> list[RecordedMessage]:
    """A deploy's messages plus the request that started it (its events' causation), or a node's messages."""
    from eru.bus.history import STORY_STREAMS, Selection

    messages = await _history(url, list(STORY_STREAMS), Selection(deploy=what))
    if not messages:
        return await _history(url, list(STORY_STREAMS), Selection(node=what))
    known = {m.envelope.id for m in messages if m.envelope}
    causes = {m.envelope.causation_id for m in messages if m.envelope and m.envelope.causation_id} - known
    for cause in sorted(causes):
        messages += await _history(url, list(STORY_STREAMS), Selection(message_id=cause))
    return sorted(messages, key=lambda m: (m.stored_at, m.stream, m.sequence))


@events_app.command("show")
def show(
    what: Annotated[str, typer.Argument(metavar="DEPLOY_ID|NODE", help="A deploy id or a node name.")],
    short: Annotated[bool, typer.Option("--short", help="One line per message, cut to the terminal width.")] = False,
    output: OutputOption = Format.text,
    as_json: JsonOption = False,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    nats: NatsOption = None,
) -> None:
    """The whole recorded story of a deploy (from its original request) or of a node, in order, untruncated."""
    fmt = chosen(output, as_json)
    try:
        messages = run_async(_story(nats_url(nats, state_dir), what))
    except EruError as error:
        fail_with(error)
    if not messages:
        missing = f"nothing recorded about {what!r} (neither a deploy id nor a node name in the retained history)"
        fail(missing, Kind.not_found, field="DEPLOY_ID|NODE")
    if fmt is not Format.text:
        emit(document("events-show", subject=what, messages=[event_json(m) for m in messages]), fmt)
        return
    if short:
        _print_lines(messages, Format.text, f"the story of {what}")
        return
    console.rule(f"the story of {what}: {len(messages)} messages")
    for message in messages:
        console.print(f"[bold]{_line_head(message)}[/]", highlight=False)
        body = render(message.body, Format.yaml)
        console.print("\n".join("    " + line for line in body.splitlines()), highlight=False, markup=False)


@events_app.command("tail")
def tail(
    subject: Annotated[str | None, typer.Option(help="NATS subject filter, e.g. 'eru.container.node-1.*'.")] = None,
    stream: Stream = None,
    deploy: Deploy = None,
    node: Node = None,
    type_: Type = None,
    as_json: LinesJson = False,
    output: OutputOption = Format.text,
    state_dir: StateDirOption = DEFAULT_STATE_DIR,
    nats: NatsOption = None,
) -> None:
    """Live messages as they are stored, until Ctrl-C (exit 130)."""
    from eru.bus.history import STORY_STREAMS, Selection

    try:
        streams = _streams(stream, STORY_STREAMS)
        selection = Selection(deploy=deploy, node=node, type_pattern=type_)
        run_async(_tail(nats_url(nats, state_dir), streams, subject, selection, chosen(output, as_json)))
    except EruError as error:
        fail_with(error)


async def _tail(url: str, streams: list[str], subject: str | None, selection: Selection, fmt: Format) -> None:
    import asyncio

    from eru.bus.connection import connect
    from eru.bus.history import read_stream
    from eru.bus.streams import default_streams

    nc = await connect(url, name="eru-events-tail", connect_timeout=3)
    js = nc.jetstream()
    specs = {spec.name: spec.subjects for spec in default_streams()}
    queue: asyncio.Queue[RecordedMessage] = asyncio.Queue()

    async def follow(stream: str) -> None:
        async for message in read_stream(js, stream, subject_filter=subject, live=True):
            await queue.put(message)

    # A subject filter names one family: follow only the streams that can hold it.
    chosen_streams = [s for s in streams if subject is None or any(_may_overlap(subject, p) for p in specs.get(s, ()))]
    followers = [asyncio.create_task(follow(stream)) for stream in chosen_streams]
    try:
        while True:
            message = await queue.get()
            if not selection.matches(message):
                continue
            if fmt is not Format.text:
                emit_line(event_json(message), fmt)
            else:  # one line per message, as `events replay`; `events show` has every body in full
                console.print(_line(message), highlight=False, markup=False, overflow="ellipsis", no_wrap=True)
    finally:
        for follower in followers:
            follower.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
        await nc.close()


def _line_head(message: RecordedMessage) -> str:
    where = f"{message.stream.removeprefix('ERU_')}:{message.sequence}"
    stored = message.stored_at.strftime("%H:%M:%S.%f")[:-3]
    return f"{stored} {where:<10} {message.subject}"


def _line(message: RecordedMessage) -> str:
    return f"{_line_head(message)}  {_summary(message.body, 200)}"


def _may_overlap(a: str, b: str) -> bool:
    """Whether two subject filters can match a common subject (token by token, `*` and `>` as wildcards)."""
    left, right = a.split("."), b.split(".")
    for x, y in zip(left, right, strict=False):
        if ">" in (x, y):
            return True
        if x != y and "*" not in (x, y):
            return False
    return len(left) == len(right)
