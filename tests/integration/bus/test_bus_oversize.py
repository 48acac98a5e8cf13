"""A message above the server's max_payload (docs/bus.md "Bounded decoding", docs/cli.md "Limits"): `request` refuses
it before sending with `InvalidInput` naming the field that made it big, and `eru` prints that as one line (exit 2).

Before the fix nats-py raised its bare `MaxPayloadError`, which reached the CLI's user as a traceback."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from eru.bus import request
from eru.domain.messages import OperationReply, RemoveRequest
from eru.errors import InvalidInput

TWO_MB = 2_000_000


async def test_a_request_above_max_payload_names_its_largest_field(nc: Any) -> None:
    # built without validation, as a client that does not check ids would send it: the bus's own check must hold
    model = RemoveRequest.model_construct(container_ids=["c1", "x" * TWO_MB])
    with pytest.raises(InvalidInput) as refused:
        await request(nc, "eru.allocator.remove", model, OperationReply, 5.0)
    assert refused.value.field == "container_ids[1]"
    assert "2,000,000 characters make the message" in refused.value.reason
    assert "max_payload" in refused.value.reason
    assert nc.is_connected  # refused before sending: the server did not drop the connection


def test_eru_prints_one_line_for_a_message_above_max_payload(nats_url: str) -> None:
    from eru.cli import container_commands  # noqa: F401 - registers `eru container`
    from eru.cli.app import app

    result = CliRunner().invoke(app, ["container", "rm", "x" * TWO_MB, "--nats", nats_url, "--timeout", "5"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output[-500:]
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output[:1000]
    # the id's own limit (docs/cli.md "Limits") refuses it before the message is even built, naming the argument
    assert lines[0].startswith("error: CONTAINER_IDS: an id is 2,000,000 characters"), lines[0][:500]
