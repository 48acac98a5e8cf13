"""Messages of `eru container logs`, `eru exec` and `eru run` (docs/node-agent.md "Logs and exec"): the request a
client sends the allocator, the one the allocator forwards to the container's node agent, and the chunks of output
the agent streams back to the client's stream subject.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from eru.domain.limits import Arguments

TAIL_MAX = 100_000
"""`--tail N`: at most this many of the last lines."""
SESSION_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"


class AttachRequest(BaseModel):
    """A client's `eru.allocator.attach` / `eru.t.<tenant>.allocator.attach`: stream a container's logs or run a
    command in it. The output goes to `eru.bus.subjects.attach_stream(tenant, session)`, which the client subscribes
    to before asking."""

    container_id: str = Field(min_length=1, max_length=128)
    action: Literal["logs", "exec"]
    session: str = Field(pattern=SESSION_PATTERN)
    follow: bool = False
    tail: int | None = Field(default=None, ge=0, le=TAIL_MAX)
    command: Arguments = Field(default_factory=list)

    @model_validator(mode="after")
    def _exec_has_a_command(self) -> AttachRequest:
        if self.action == "exec" and not self.command:
            raise ValueError("command: exec needs a command to run")
        return self


class AgentAttach(AttachRequest):
    """What the allocator forwards on `eru.node.<node>.attach` once the caller may act on the container: the same
    request with the subject the agent streams to."""

    subject: str = Field(min_length=1, max_length=300)


class AttachReply(BaseModel):
    """The answer to an attach request: the agent accepted it and streams to `subject` from sequence 0."""

    container_id: str
    node: str
    session: str
    subject: str


Kind = Literal["out", "end", "ping"]


class AttachChunk(BaseModel):
    """One message on a stream subject: output (`out`, sequence-numbered from 0, each below the bus's max payload),
    the `end` (the exit code of the command, or of the container when `logs -f` saw it exit; `error` when the
    stream broke), or a `ping` (a request: the client answers it, or the agent stops streaming)."""

    session: str
    kind: Kind
    seq: int = 0
    stream: Literal["stdout", "stderr", ""] = ""
    data: str = ""
    exit_code: int | None = None
    error: str | None = None
