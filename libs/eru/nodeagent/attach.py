"""Pure helpers of the logs/exec streams (docs/node-agent.md "Logs and exec"): split output into chunks that fit the
bus, read Docker's multiplexed stream, and put a stream's chunks back in order on the client's side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

CHUNK_BYTES = 64 * 1024
"""Output per chunk at most (bytes of UTF-8): far below any bus's max payload, and lines arrive as they are written."""
ENVELOPE_ROOM = 8 * 1024
"""Room kept in a message for the envelope headers and the chunk's other fields."""
STDOUT, STDERR = 1, 2
_HEADER = 8


def chunk_limit(max_payload: int) -> int:
    """Bytes of output per chunk on a bus whose messages carry at most `max_payload` bytes."""
    return max(1, min(CHUNK_BYTES, max_payload - ENVELOPE_ROOM))


def split_text(text: str, limit: int) -> list[str]:
    """`text` in pieces of at most `limit` UTF-8 bytes, never splitting a character (an empty text: no piece)."""
    pieces: list[str] = []
    start = 0
    size = 0
    for index, char in enumerate(text):
        width = len(char.encode("utf-8", "surrogatepass"))
        if size + width > limit and index > start:
            pieces.append(text[start:index])
            start, size = index, 0
        size += width
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def demux(buffer: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """Frames of Docker's multiplexed stream (a container without a TTY): each an 8-byte header (stream 1 stdout,
    2 stderr; three zero bytes; a big-endian 4-byte size) and its bytes. Returns the complete frames and the rest."""
    frames: list[tuple[int, bytes]] = []
    offset = 0
    while len(buffer) - offset >= _HEADER:
        size = int.from_bytes(buffer[offset + 4 : offset + 8], "big")
        end = offset + _HEADER + size
        if len(buffer) < end:
            break
        frames.append((buffer[offset], buffer[offset + _HEADER : end]))
        offset = end
    return frames, buffer[offset:]


def stream_name(number: int) -> str:
    """`stdout` or `stderr` for a frame's stream number (stdin's 0 and anything else count as stdout)."""
    return "stderr" if number == STDERR else "stdout"


@dataclass
class Ordered(Generic[T]):
    """A stream's chunks back in sequence order. Core NATS keeps one publisher's order, so a gap is a lost chunk
    (a slow client): `take` skips it after `window` later chunks arrived and counts it in `lost`."""

    window: int = 64
    next_seq: int = 0
    lost: int = 0
    _held: dict[int, T] = field(default_factory=dict)

    def take(self, seq: int, item: T) -> list[T]:
        """The items that are now in order, after adding chunk `seq`."""
        if seq < self.next_seq:
            return []
        self._held[seq] = item
        ready: list[T] = []
        while True:
            if self.next_seq in self._held:
                ready.append(self._held.pop(self.next_seq))
                self.next_seq += 1
            elif len(self._held) >= self.window:
                self.lost += 1
                self.next_seq += 1
            else:
                return ready

    def flush(self, end_seq: int) -> list[T]:
        """Everything held once the end came (after chunk `end_seq - 1`): what is missing then is lost."""
        ready: list[T] = []
        while self.next_seq < end_seq:
            if self.next_seq in self._held:
                ready.append(self._held.pop(self.next_seq))
            else:
                self.lost += 1
            self.next_seq += 1
        return ready


@dataclass
class Prefixed:
    """Output of several instances on one terminal (`eru run --count N`): whole lines, each prefixed `[n] `; a line
    not finished yet is held per instance and stream until its newline (or the end)."""

    _partial: dict[tuple[str, str], str] = field(default_factory=dict)

    def lines(self, prefix: str, stream: str, text: str) -> str:
        """The complete lines `text` finishes, prefixed; the rest is held."""
        held = self._partial.get((prefix, stream), "") + text
        complete, newline, rest = held.rpartition("\n")
        self._partial[(prefix, stream)] = rest
        if not newline:
            return ""
        return "".join(f"{prefix}{line}\n" for line in complete.split("\n"))

    def rest(self, prefix: str, stream: str) -> str:
        """What is held of an unfinished last line, prefixed and ended (empty when nothing is held)."""
        held = self._partial.pop((prefix, stream), "")
        return f"{prefix}{held}\n" if held else ""
