"""The pure parts of the logs/exec streams (eru.nodeagent.attach, docs/node-agent.md "Logs and exec"): chunks fit
the bus and never split a character, Docker's multiplexed frames keep stdout and stderr apart, the client puts
chunks back in order and counts what was lost, `eru run --count N` prefixes whole lines."""

from __future__ import annotations

from eru.bus.codec import encode
from eru.domain.attach import AttachChunk
from eru.nodeagent.attach import CHUNK_BYTES, Ordered, Prefixed, chunk_limit, demux, split_text, stream_name


def test_output_larger_than_the_max_payload_goes_out_in_chunks_that_each_fit() -> None:
    max_payload = 1024 * 1024
    limit = chunk_limit(max_payload)
    assert limit == CHUNK_BYTES == 65_536
    text = ("é" * 300_000) + "tail\n"  # 600,005 bytes of UTF-8: more than half the bus's max payload
    pieces = split_text(text, limit)
    assert "".join(pieces) == text
    assert len(pieces) == 10
    for piece in pieces:
        assert len(piece.encode()) <= limit
        body = encode(AttachChunk(session="s1", kind="out", seq=7, stream="stdout", data=piece))
        assert len(body) < max_payload - 4096  # room for the envelope headers
    small_bus = chunk_limit(20_000)
    assert small_bus == 20_000 - 8 * 1024
    assert all(len(p.encode()) <= small_bus for p in split_text(text, small_bus))
    assert split_text("", limit) == []


def test_demux_reads_whole_frames_and_keeps_the_rest() -> None:
    def frame(stream: int, data: bytes) -> bytes:
        return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data

    buffer = frame(1, b"out\n") + frame(2, b"err\n") + frame(1, b"partial")[:9]
    frames, rest = demux(buffer)
    assert frames == [(1, b"out\n"), (2, b"err\n")]
    assert rest == frame(1, b"partial")[:9]
    frames, rest = demux(rest + frame(1, b"partial")[9:])
    assert (frames, rest) == ([(1, b"partial")], b"")
    assert [stream_name(n) for n in (1, 2, 0)] == ["stdout", "stderr", "stdout"]


def test_chunks_out_of_order_are_put_back_and_a_lost_one_is_counted() -> None:
    ordered: Ordered[str] = Ordered(window=3)
    assert ordered.take(1, "b") == []
    assert ordered.take(0, "a") == ["a", "b"]
    assert ordered.take(0, "a again") == []  # a repeat of something delivered
    # chunk 2 is lost: after `window` later ones it is skipped
    assert ordered.take(3, "d") == []
    assert ordered.take(4, "e") == []
    assert ordered.take(5, "f") == ["d", "e", "f"]
    assert ordered.lost == 1
    assert ordered.take(7, "h") == []
    assert ordered.flush(9) == ["h"]  # the end says 9 chunks were sent: 6 and 8 never came
    assert ordered.lost == 3


def test_prefixed_lines_are_whole_and_the_rest_comes_at_the_end() -> None:
    lines = Prefixed()
    assert lines.lines("[1] ", "stdout", "hel") == ""
    assert lines.lines("[2] ", "stdout", "hi\nthere") == "[2] hi\n"
    assert lines.lines("[1] ", "stdout", "lo\n\nwor") == "[1] hello\n[1] \n"
    assert lines.lines("[1] ", "stderr", "oops\n") == "[1] oops\n"
    assert lines.rest("[1] ", "stdout") == "[1] wor\n"
    assert lines.rest("[2] ", "stdout") == "[2] there\n"
    assert lines.rest("[2] ", "stderr") == ""
