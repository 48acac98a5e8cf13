"""How one node's agent behaves, and the ids of the results it publishes."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass

RESULT_NAMESPACE = uuid.UUID("5f0c3c8e-6f7e-4f55-9a7a-2f6b1e0d9a31")
# commands working on the engine at once, taken in request order (docs/node-agent.md "Concurrency": the bound at
# which a batch's first containers run soonest while the engine stays as busy as a client sending all at once)
ENGINE_CONCURRENCY = 8


@dataclass(frozen=True)
class AgentConfig:
    """How one node's agent behaves."""

    node: str
    pod: str = "default"
    share_base: int = 100
    metrics_interval_seconds: float = 5.0
    heartbeat_interval_seconds: float = 5.0
    inventory_interval_seconds: float = 30.0
    max_concurrent_commands: int = 8
    engine_concurrency: int = ENGINE_CONCURRENCY
    stop_timeout_seconds: float = 5.0
    max_deliver: int = 5
    ack_wait_seconds: float = 60.0
    settle_seconds: float = 1.0
    summary_interval_seconds: float = 60.0
    # the command consumer's idle polling: a pull request per fetch timeout, a consumer-info per health check
    fetch_timeout_seconds: float = 1.0
    heal_check_seconds: float = 2.0

    @property
    def source(self) -> str:
        """`ce-source` of everything this agent publishes."""
        return f"node-agent/{self.node}"

    @property
    def durable(self) -> str:
        """The node's durable consumer on ERU_NODE."""
        return f"node-agent-{self.node}"


_RESULT_HASH = hashlib.sha1(RESULT_NAMESPACE.bytes, usedforsecurity=False)


def result_id(node: str, command_id: str) -> str:
    """The message id of a command's result event: the same for every execution attempt and every repeat.

    `uuid.uuid5(RESULT_NAMESPACE, "<node>/<command_id>")`, from a copy of the hash already fed the namespace."""
    digest = _RESULT_HASH.copy()
    digest.update(f"{node}/{command_id}".encode())
    return str(uuid.UUID(bytes=digest.digest()[:16], version=5))
