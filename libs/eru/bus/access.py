"""Access control on the bus: one NATS user per role with subject permissions (docs/security.md).

Roles: `admin` (operators, provisioning, the CLI of the embedded stack), `client` (publishes deploy requests and
asks the allocator, never talks to node agents), the three central services (`allocator`, `distributor`,
`eviction`), and one `node-agent` user per agent, confined to the nodes it serves: it publishes only those nodes'
metrics, results, registrations and heartbeats, and can consume only those nodes' commands. Each user gets its own
reply-inbox prefix (`_INBOX_<user>`), and only a user's own prefix is subscribable, so nobody can read the replies
(for example JetStream deliveries of another node's commands) meant for somebody else.

Everything here is a pure function of its arguments; `new_password` is the one source of randomness.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit, urlunsplit

from eru.bus.streams import DEPLOY, DLQ, EVENTS, NODE
from eru.bus.subjects import token
from eru.errors import InvalidInput

ROLES = ("admin", "client", "allocator", "distributor", "eviction", "node-agent")
JS_API = "$JS.API"
# What every role may do: discover JetStream, answer micro-service discovery (`$SRV.PING|INFO|STATS`) and the
# per-replica health endpoints (`eru.svc.<service>.<replica>.health`).
_COMMON_PUBLISH = (f"{JS_API}.INFO",)
_COMMON_SUBSCRIBE = ("$SRV.>", "eru.svc.>")
# Dead letters (`eru dlq ls | show | redrive`) are the operator's alone: read ERU_DLQ through the JetStream API
# (an ephemeral consumer, single-message gets, deletes after a redrive) and re-publish on the original subjects.
OPERATOR_DEAD_LETTERS = (
    f"{JS_API}.STREAM.INFO.{DLQ}",
    f"{JS_API}.STREAM.MSG.GET.{DLQ}",
    f"{JS_API}.STREAM.MSG.DELETE.{DLQ}",
    f"{JS_API}.CONSUMER.CREATE.{DLQ}",
    f"{JS_API}.CONSUMER.CREATE.{DLQ}.>",
    f"{JS_API}.CONSUMER.MSG.NEXT.{DLQ}.*",
    f"{JS_API}.CONSUMER.DELETE.{DLQ}.*",
)


@dataclass(frozen=True)
class Permissions:
    """Subjects a user may publish to and subscribe to (NATS wildcards), plus deny lists that override them."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    publish_deny: tuple[str, ...] = ()
    subscribe_deny: tuple[str, ...] = ()

    def to_config(self) -> dict[str, object]:
        """The `permissions` block of a nats-server user; replies to requests it received are always allowed."""
        publish: dict[str, object] = {"allow": list(self.publish)}
        subscribe: dict[str, object] = {"allow": list(self.subscribe)}
        if self.publish_deny:
            publish["deny"] = list(self.publish_deny)
        if self.subscribe_deny:
            subscribe["deny"] = list(self.subscribe_deny)
        return {"publish": publish, "subscribe": subscribe, "allow_responses": True}


@dataclass(frozen=True)
class Account:
    """One NATS user: its role, credentials, permissions and the inbox prefix it must connect with."""

    user: str
    password: str
    role: str
    permissions: Permissions
    nodes: tuple[str, ...] = field(default=())

    @property
    def inbox_prefix(self) -> str:
        """The reply-subject prefix of this user (`_INBOX_<user>`), the only inbox it may subscribe to."""
        return f"_INBOX_{self.user}"

    def url(self, server_url: str) -> str:
        """`server_url` with this user's credentials in it (what a service's `bus.url` is set to)."""
        parts = urlsplit(server_url)
        host = parts.hostname or "127.0.0.1"
        netloc = f"{quote(self.user, safe='')}:{quote(self.password, safe='')}@{host}"
        return urlunsplit(parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")))


def node_agent_durable(node: str) -> str:
    """The durable consumer through which the agent of `node` takes its commands (stream ERU_NODE)."""
    return f"node-agent-{token(node, 'node')}"


def _own_inbox(user: str) -> str:
    return f"_INBOX_{user}.>"


def node_agent_permissions(user: str, nodes: Sequence[str]) -> Permissions:
    """Publish only these nodes' metrics/results/registrations/heartbeats; consume only their commands."""
    if not nodes:
        raise InvalidInput("nodes", f"node-agent user {user!r} must serve at least one node")
    # stream metadata (not messages): an agent checks at start that the streams it uses exist
    publish: list[str] = [*_COMMON_PUBLISH, f"{JS_API}.STREAM.INFO.*"]
    for node in nodes:
        token(node, "node")
        durable = node_agent_durable(node)
        publish += [
            f"eru.metrics.{node}",
            f"eru.container.{node}.*",
            f"eru.node.{node}.registered",
            f"eru.node.{node}.heartbeat",
            f"eru.node.{node}.inventory",
            f"eru.dlq.eru.node.{node}.cmd.*",
            # its own durable consumer, and only with its own node's filter (the filter is part of the subject)
            f"{JS_API}.CONSUMER.CREATE.{NODE}.{durable}.eru.node.{node}.cmd.*",
            f"{JS_API}.CONSUMER.INFO.{NODE}.{durable}",
            f"{JS_API}.CONSUMER.MSG.NEXT.{NODE}.{durable}",
            f"$JS.ACK.{NODE}.{durable}.>",
        ]
    return Permissions(publish=tuple(publish), subscribe=(*_COMMON_SUBSCRIBE, _own_inbox(user)))


def role_permissions(role: str, user: str) -> Permissions:
    """Permissions of a central role (everything but `node-agent`, which needs its nodes)."""
    inbox = _own_inbox(user)
    if role == "admin":
        # the operator role: everything, including OPERATOR_DEAD_LETTERS
        return Permissions(publish=(">",), subscribe=(">",))
    if role == "client":
        return Permissions(
            publish=(
                *_COMMON_PUBLISH,
                "eru.deploy.request",
                "eru.allocator.>",
                f"{JS_API}.STREAM.INFO.*",
                f"{JS_API}.CONSUMER.CREATE.{DEPLOY}.>",
                f"{JS_API}.CONSUMER.CREATE.{EVENTS}.>",
                f"{JS_API}.CONSUMER.MSG.NEXT.{DEPLOY}.*",
                f"{JS_API}.CONSUMER.MSG.NEXT.{EVENTS}.*",
                f"{JS_API}.CONSUMER.DELETE.*.*",
            ),
            subscribe=(*_COMMON_SUBSCRIBE, inbox, "eru.deploy.*.*"),
            publish_deny=(
                "eru.node.>",
                "eru.container.>",
                "eru.metrics.>",
                "eru.eviction.>",
                # reservations hold a node's resources for one tenant: operators only
                "eru.allocator.tenant-reserve",
                "eru.allocator.tenant-unreserve",
                # dead letters: operators only (a client could read others' requests or forge dead letters)
                "eru.dlq.>",
                *OPERATOR_DEAD_LETTERS,
            ),
            subscribe_deny=("eru.dlq.>",),
        )
    if role == "distributor":
        return Permissions(publish=_COMMON_PUBLISH, subscribe=(*_COMMON_SUBSCRIBE, inbox, "eru.distributor.place"))
    if role in ("allocator", "eviction"):
        # Trusted central services: they publish anywhere (commands, events, replies into any requester's inbox,
        # the JetStream API), but read only eru subjects and their own inbox.
        return Permissions(publish=(">",), subscribe=(*_COMMON_SUBSCRIBE, inbox, "eru.>"))
    raise InvalidInput("role", f"unknown role {role!r} (known: {', '.join(ROLES)})")


def new_password() -> str:
    """A fresh random password (URL-safe, 32 bytes of entropy)."""
    return secrets.token_urlsafe(32)


def make_account(role: str, user: str, password: str, nodes: Sequence[str] = ()) -> Account:
    """An account of `role` named `user`; a `node-agent` account serves `nodes`."""
    token(user, "user")
    permissions = node_agent_permissions(user, nodes) if role == "node-agent" else role_permissions(role, user)
    return Account(user=user, password=password, role=role, permissions=permissions, nodes=tuple(nodes))


def render_server_config(accounts: Sequence[Account], *, extra: str = "") -> str:
    """A nats-server configuration block with these users (JSON values are valid in the server's config syntax)."""
    users = [
        {"user": a.user, "password": a.password, "permissions": a.permissions.to_config()}
        for a in sorted(accounts, key=lambda a: a.user)
    ]
    seen: set[str] = set()
    for account in accounts:
        if account.user in seen:
            raise InvalidInput("user", f"user {account.user!r} appears twice")
        seen.add(account.user)
    return f"authorization: {json.dumps({'users': users}, indent=2)}\n{extra}"
