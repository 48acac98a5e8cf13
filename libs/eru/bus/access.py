"""Access control on the bus: one NATS user per role with subject permissions (docs/security.md).

Roles: `admin` (provisioning by `eru up`: everything), `operator` (everything the `eru` CLI does), `client` (bound
to ONE tenant: deploy, remove, realloc, replace and query requests on that tenant's subjects `eru.t.<tenant>.…`,
its own inbox, that tenant's events, nothing under `$JS.API`), the three central services (`allocator`,
`distributor`, `eviction`), and one `node-agent` user per agent, confined to the nodes it serves: it publishes only
those nodes' metrics, results, registrations and heartbeats, and can consume only those nodes' commands. Each user
gets its own reply-inbox prefix (`_INBOX_<user>`), and only a user's own prefix is subscribable, so nobody can read
the replies (for example JetStream deliveries of another node's commands) meant for somebody else.

The server configuration holds bcrypt hashes, never the passwords. Everything here is a pure function of its
arguments but `new_password` and the salt of `password_hash`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, urlsplit, urlunsplit

from eru.bus.node_groups import group_durable
from eru.bus.streams import DLQ, NODE
from eru.bus.subjects import ATTACH_PREFIX, TENANT_OPERATIONS, TENANT_PREFIX, TENANT_STREAM_OPERATIONS, token
from eru.errors import InvalidInput

ROLES = ("admin", "operator", "client", "allocator", "distributor", "eviction", "node-agent")
CLIENT_USER_PREFIX = "tenant-"
# bcrypt cost of the hashes in nats.conf. nats-server checks a hash at every connection (each CLI command, each
# reconnect): at load 19 on the dev machine a connect took 368 ms at cost 10, 45 ms at 6, 25 ms at 4
# (bench/bench_bus_auth.py). The cost slows the guessing of weak passwords; ours are 256-bit random tokens
# (`new_password`), out of reach at any cost, so the minimum is used (docs/security.md).
BCRYPT_ROUNDS = 4
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
    responses: bool = True

    def to_config(self) -> dict[str, object]:
        """The `permissions` block of a nats-server user; with `responses`, replies to requests it received are
        allowed whatever the reply subject."""
        publish: dict[str, object] = {"allow": list(self.publish)}
        subscribe: dict[str, object] = {"allow": list(self.subscribe)}
        if self.publish_deny:
            publish["deny"] = list(self.publish_deny)
        if self.subscribe_deny:
            subscribe["deny"] = list(self.subscribe_deny)
        config: dict[str, object] = {"publish": publish, "subscribe": subscribe}
        if self.responses:
            config["allow_responses"] = True
        return config


@dataclass(frozen=True)
class Account:
    """One NATS user: its role, credentials, permissions and the inbox prefix it must connect with."""

    user: str
    password: str
    role: str
    permissions: Permissions
    nodes: tuple[str, ...] = field(default=())
    tenant: str | None = None
    command_group: str | None = None

    @property
    def inbox_prefix(self) -> str:
        """The reply-subject prefix of this user (`_INBOX_<user>`), the only inbox it may subscribe to."""
        return f"_INBOX_{self.user}"

    def url(self, server_url: str) -> str:
        """`server_url` with this user's credentials in it (what a service's `bus.url` is set to); several
        comma-separated URLs (a cluster's servers) each get them."""
        if "," in server_url:
            return ",".join(self.url(part.strip()) for part in server_url.split(",") if part.strip())
        parts = urlsplit(server_url)
        host = parts.hostname or "127.0.0.1"
        netloc = f"{quote(self.user, safe='')}:{quote(self.password, safe='')}@{host}"
        return urlunsplit(parts._replace(netloc=netloc + (f":{parts.port}" if parts.port else "")))


def node_agent_durable(node: str) -> str:
    """The durable consumer through which the agent of `node` takes its commands (stream ERU_NODE)."""
    return f"node-agent-{token(node, 'node')}"


def _own_inbox(user: str) -> str:
    return f"_INBOX_{user}.>"


def node_agent_permissions(user: str, nodes: Sequence[str], command_group: str | None = None) -> Permissions:
    """Publish only these nodes' metrics/results/registrations/heartbeats; consume only their commands: through each
    node's own consumer, or (`command_group`) through the group consumer the stack provisioned over exactly these
    nodes (eru.bus.node_groups), which this user may read, pull from and ack, but not create or change."""
    if not nodes:
        raise InvalidInput("nodes", f"node-agent user {user!r} must serve at least one node")
    # stream metadata (not messages): an agent checks at start that the streams it uses exist
    # the output of `eru container logs|exec|run` goes to the client's stream subject, an operator's or a tenant's
    # (docs/security.md "Logs and exec")
    publish: list[str] = [
        *_COMMON_PUBLISH,
        f"{JS_API}.STREAM.INFO.*",
        f"{ATTACH_PREFIX}.*",
        f"{TENANT_PREFIX}.*.attach.*",
    ]
    subscribe: list[str] = [*_COMMON_SUBSCRIBE, _own_inbox(user)]
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
        subscribe.append(f"eru.node.{node}.attach")  # the allocator's requests to stream logs or an exec
    if command_group is not None:
        group = group_durable(command_group)
        publish += [
            f"eru.heartbeats.{token(command_group, 'command_group')}",  # its nodes' heartbeats, one message
            f"eru.inventories.{command_group}",  # its nodes' inventories, one message a flush
            f"eru.group.{command_group}.results",  # the results of its group's batches, one message each
            # dead-lettering a batch of its group it cannot run (it may neither publish nor read another group's:
            # its consumer, which only the stack creates, filters on its own group's subject)
            f"eru.dlq.eru.group.{command_group}.cmd.batch",
            f"{JS_API}.CONSUMER.INFO.{NODE}.{group}",
            f"{JS_API}.CONSUMER.MSG.NEXT.{NODE}.{group}",
            f"$JS.ACK.{NODE}.{group}.>",
        ]
    return Permissions(publish=tuple(publish), subscribe=tuple(subscribe))


def client_user(tenant: str) -> str:
    """The NATS user of `tenant`'s clients (`tenant-<tenant>`); the tenant is what the credentials say."""
    return CLIENT_USER_PREFIX + token(tenant, "tenant")


def tenant_of_user(user: str | None) -> str | None:
    """The tenant a client user is bound to (`tenant-team-a` → `team-a`), None for any other user."""
    if user and user.startswith(CLIENT_USER_PREFIX) and len(user) > len(CLIENT_USER_PREFIX):
        return user[len(CLIENT_USER_PREFIX) :]
    return None


def client_permissions(user: str, tenant: str) -> Permissions:
    """A tenant's client: its tenant's deploy and operation requests, its own inbox and its tenant's events.

    Nothing under `$JS.API` (a deploy request is a plain publish onto a stream subject, whose acknowledgement comes
    back to the inbox), so it can neither manage nor pull from any consumer, and it names no other tenant."""
    scope = f"{TENANT_PREFIX}.{token(tenant, 'tenant')}"
    operations = (*TENANT_OPERATIONS, *TENANT_STREAM_OPERATIONS)
    publish = (f"{scope}.deploy.request", *(f"{scope}.allocator.{op}" for op in operations))
    subscribe = (_own_inbox(user), f"{scope}.deploy.>", f"{scope}.container.>", f"{scope}.attach.>")
    # `responses`: it answers the agent's pings on its stream subject (a session nobody answers stops streaming)
    return Permissions(publish=publish, subscribe=subscribe, responses=True)


def role_permissions(role: str, user: str) -> Permissions:
    """Permissions of a central role (everything but `node-agent`, which needs its nodes, and `client`, which
    needs its tenant)."""
    inbox = _own_inbox(user)
    if role == "admin":
        return Permissions(publish=(">",), subscribe=(">",))
    if role == "operator":
        # Everything the CLI does: nodes, pods, tenants, cordon, set-node, deploys, replay, streams and consumers,
        # and dead letters (OPERATOR_DEAD_LETTERS; a redrive re-publishes on the original subject, an agent's or a
        # service's included) — but it reads no other user's inbox, so no reply meant for a tenant or a service.
        return Permissions(publish=(">",), subscribe=(*_COMMON_SUBSCRIBE, inbox, "eru.>"), responses=False)
    if role == "distributor":
        return Permissions(
            publish=_COMMON_PUBLISH,
            subscribe=(*_COMMON_SUBSCRIBE, inbox, "eru.distributor.place", "eru.distributor.place_batch"),
        )
    if role in ("allocator", "eviction"):
        # Trusted central services: they publish anywhere (commands, events, replies into any requester's inbox,
        # the JetStream API), but read only eru subjects and their own inbox.
        return Permissions(publish=(">",), subscribe=(*_COMMON_SUBSCRIBE, inbox, "eru.>"))
    raise InvalidInput("role", f"unknown role {role!r} (known: {', '.join(ROLES)})")


def new_password() -> str:
    """A fresh random password (URL-safe, 32 bytes of entropy)."""
    return secrets.token_urlsafe(32)


def password_hash(password: str) -> str:
    """The bcrypt hash (`$2a$…`, the form nats-server accepts) of `password`, for the server configuration."""
    import bcrypt

    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=BCRYPT_ROUNDS, prefix=b"2a")).decode()


def make_account(
    role: str,
    user: str,
    password: str,
    nodes: Sequence[str] = (),
    *,
    tenant: str | None = None,
    command_group: str | None = None,
) -> Account:
    """An account of `role` named `user`; a `node-agent` account serves `nodes` (through the group consumer
    `command_group` when given), a `client` account one `tenant`."""
    token(user, "user")
    if command_group is not None and role != "node-agent":
        raise InvalidInput("command_group", f"only a node-agent account takes its commands in a group, not {role!r}")
    if role == "node-agent":
        permissions = node_agent_permissions(user, nodes, command_group)
    elif role == "client":
        if tenant is None:
            raise InvalidInput("tenant", f"client user {user!r} must be bound to a tenant")
        permissions = client_permissions(user, tenant)
    else:
        permissions = role_permissions(role, user)
    return Account(
        user=user,
        password=password,
        role=role,
        permissions=permissions,
        nodes=tuple(nodes),
        tenant=tenant,
        command_group=command_group,
    )


def client_account(tenant: str, password: str) -> Account:
    """The account of `tenant`'s clients (user `tenant-<tenant>`)."""
    return make_account("client", client_user(tenant), password, tenant=tenant)


def render_server_config(accounts: Sequence[Account], *, extra: str = "", hashed: bool = True) -> str:
    """A nats-server configuration block with these users (JSON values are valid in the server's config syntax);
    passwords as bcrypt hashes unless `hashed=False`."""
    users = [
        {
            "user": a.user,
            "password": password_hash(a.password) if hashed else a.password,
            "permissions": a.permissions.to_config(),
        }
        for a in sorted(accounts, key=lambda a: a.user)
    ]
    seen: set[str] = set()
    for account in accounts:
        if account.user in seen:
            raise InvalidInput("user", f"user {account.user!r} appears twice")
        seen.add(account.user)
    return f"authorization: {json.dumps({'users': users}, indent=2)}\n{extra}"
