"""Access control of the embedded stack: `eru up` generates one NATS user per role and the server configuration.

The services' passwords are generated afresh at every start (every process of the stack is started with them) and
live only in those processes' environments; the server configuration `<state_dir>/auth/nats.conf` holds bcrypt
hashes. The operator's and the tenants' passwords are kept owner-only in `<state_dir>/auth/`: the operator's URL is
in `stack.json` (the CLI on this machine), each tenant's in `auth/tenants.json`, so that `eru tenant credentials`
can hand it out again and a restart keeps it valid. Adding a tenant rewrites nats.conf and asks the running
nats-server to reload it (SIGHUP). See docs/security.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from eru.bus.access import Account, client_account, make_account, new_password, password_hash
from eru.errors import EruError

SERVICE_ROLES = ("admin", "allocator", "distributor", "eviction")
DEFAULT_TENANT = "default"
AUTH_DIR = "auth"
USERS_FILE = "users.json"  # the server's user entries (bcrypt hashes), from which nats.conf is rendered
TENANTS_FILE = "tenants.json"  # tenant → its client password (owner-only)
OPERATOR_FILE = "operator.password"
POSTGRES_PASSWORD_FILE = "postgres.password"  # the embedded PostgreSQL's superuser (scram-sha-256)
ADMIN_URL_FILE = "admin.url"  # the admin's URL of the running stack (fresh at every start)


def sim_node_names(prefix: str, count: int) -> list[str]:
    """Names of `count` simulated nodes: the prefix itself for one, else `<prefix>-001`, `<prefix>-002` …"""
    if count == 1:
        return [prefix]
    width = max(3, len(str(count)))
    return [f"{prefix}-{index:0{width}d}" for index in range(1, count + 1)]


@dataclass(frozen=True)
class StackAccounts:
    """The accounts of one stack, by role (node agents by their process name, tenants' clients by user)."""

    accounts: dict[str, Account]
    config_file: Path

    def env_for(self, name: str, server_url: str) -> dict[str, str]:
        """The environment that makes process `name` connect as its account."""
        account = self.accounts[name]
        return {"ERU_BUS__URL": account.url(server_url), "ERU_BUS__INBOX_PREFIX": account.inbox_prefix}


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, readable and writable by the owner only (0600), its directory 0700."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.parent.chmod(0o700)
    tmp = path.with_name(path.name + ".tmp")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    tmp.chmod(0o600)
    tmp.replace(path)


def _user_entry(account: Account) -> dict[str, Any]:
    return {
        "user": account.user,
        "password": password_hash(account.password),
        "permissions": account.permissions.to_config(),
    }


def _render(users: list[dict[str, Any]]) -> str:
    ordered = sorted(users, key=lambda u: str(u["user"]))
    return f"authorization: {json.dumps({'users': ordered}, indent=2)}\n"


def _write_users(auth_dir: Path, users: list[dict[str, Any]]) -> Path:
    write_private(auth_dir / USERS_FILE, json.dumps(users, indent=2))
    config_file = auth_dir / "nats.conf"
    write_private(config_file, _render(users))
    return config_file


def tenant_passwords(state_dir: Path) -> dict[str, str]:
    """Tenant → client password of the stack (empty before the first `eru up`)."""
    path = state_dir / AUTH_DIR / TENANTS_FILE
    if not path.exists():
        return {}
    value = json.loads(path.read_text())
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def persistent_password(path: Path) -> str:
    """The password kept in `path` (0600), generated on first use: the same across restarts of the stack."""
    if path.exists():
        return path.read_text().strip()
    password = new_password()
    write_private(path, password)
    return password


def generate_stack_accounts(
    state_dir: Path, node_agents: dict[str, list[str]], command_groups: dict[str, str] | None = None
) -> StackAccounts:
    """Accounts for the services (fresh passwords), the operator and every tenant issued credentials so far (kept
    passwords; the `default` tenant always has one), and each node-agent process (name → the nodes it serves, and
    its command group when it has one: eru.bus.node_groups); the server configuration is written to
    `<state_dir>/auth/nats.conf`."""
    groups = command_groups or {}
    auth_dir = state_dir / AUTH_DIR
    accounts = {role: make_account(role, role, new_password()) for role in SERVICE_ROLES}
    accounts["operator"] = make_account("operator", "operator", persistent_password(auth_dir / OPERATOR_FILE))
    for process, nodes in node_agents.items():
        accounts[process] = make_account(
            "node-agent", process, new_password(), nodes=nodes, command_group=groups.get(process)
        )
    tenants = tenant_passwords(state_dir)
    if DEFAULT_TENANT not in tenants:
        tenants[DEFAULT_TENANT] = new_password()
        write_private(auth_dir / TENANTS_FILE, json.dumps(tenants, indent=2))
    for tenant, password in sorted(tenants.items()):
        account = client_account(tenant, password)
        accounts[account.user] = account
    config_file = _write_users(auth_dir, [_user_entry(a) for a in accounts.values()])
    summary = {
        name: {
            "user": a.user,
            "role": a.role,
            "nodes": list(a.nodes),
            "tenant": a.tenant,
            "command_group": a.command_group,
        }
        for name, a in accounts.items()
    }
    write_private(auth_dir / "accounts.json", json.dumps(summary, indent=2))
    return StackAccounts(accounts=accounts, config_file=config_file)


def issue_tenant_credentials(
    state_dir: Path,
    tenant: str,
    *,
    rotate: bool = False,
    server_pid: int | None = None,
    server_pids: Sequence[int] = (),
) -> Account:
    """The client account of `tenant` on the stack under `state_dir`: created (or, with `rotate`, given a new
    password) and added to the running nats-servers' configuration (each reloaded with SIGHUP: `server_pid` and
    every one of `server_pids`, a cluster's), else the existing one."""
    auth_dir = state_dir / AUTH_DIR
    users_file = auth_dir / USERS_FILE
    if not users_file.exists():
        raise EruError(
            f"no access control under {state_dir}: start the stack with `eru up` (without --no-auth) first",
            code="stack_error",
        )
    tenants = tenant_passwords(state_dir)
    known = tenant in tenants and not rotate
    account = client_account(tenant, tenants[tenant] if known else new_password())
    if known:
        return account
    tenants[tenant] = account.password
    write_private(auth_dir / TENANTS_FILE, json.dumps(tenants, indent=2))
    users = [u for u in json.loads(users_file.read_text()) if u.get("user") != account.user]
    _write_users(auth_dir, [*users, _user_entry(account)])
    for pid in [*([server_pid] if server_pid is not None else []), *server_pids]:
        reload_nats_server(pid)
    return account


def reload_nats_server(pid: int) -> None:
    """SIGHUP: nats-server re-reads its configuration, users and permissions included (after checking that `pid`
    really is a nats-server, so a reused pid is never signalled)."""
    with contextlib.suppress(psutil.Error):
        if "nats-server" in psutil.Process(pid).name():
            os.kill(pid, signal.SIGHUP)
