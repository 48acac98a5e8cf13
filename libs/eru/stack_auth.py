"""Access control of the embedded stack: `eru up` generates one NATS user per role and the server configuration.

Credentials are generated afresh at every start (every process of the stack is started with them), kept in
`<state_dir>/auth/` readable by the owner only, and handed to each process as its `bus.url` (credentials in the
URL, redacted in every log line) plus its `bus.inbox_prefix`. The CLI of the same machine uses the admin account
through `stack.json`, which is owner-only for that reason. See docs/security.md.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from eru.bus.access import Account, make_account, new_password, render_server_config

CENTRAL_ROLES = ("admin", "client", "allocator", "distributor", "eviction")


def sim_node_names(prefix: str, count: int) -> list[str]:
    """Names of `count` simulated nodes: the prefix itself for one, else `<prefix>-001`, `<prefix>-002` …"""
    if count == 1:
        return [prefix]
    width = max(3, len(str(count)))
    return [f"{prefix}-{index:0{width}d}" for index in range(1, count + 1)]


@dataclass(frozen=True)
class StackAccounts:
    """The accounts of one stack, by role (node agents by their process name)."""

    accounts: dict[str, Account]
    config_file: Path

    def env_for(self, name: str, server_url: str) -> dict[str, str]:
        """The environment that makes process `name` connect as its account."""
        account = self.accounts[name]
        return {"ERU_BUS__URL": account.url(server_url), "ERU_BUS__INBOX_PREFIX": account.inbox_prefix}


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)
    path.chmod(0o600)


def generate_stack_accounts(state_dir: Path, node_agents: dict[str, list[str]]) -> StackAccounts:
    """Fresh accounts for the central roles and for each node-agent process (name → the nodes it serves), with the
    server configuration written to `<state_dir>/auth/nats.conf`."""
    accounts = {role: make_account(role, role, new_password()) for role in CENTRAL_ROLES}
    for process, nodes in node_agents.items():
        accounts[process] = make_account("node-agent", process, new_password(), nodes=nodes)
    auth_dir = state_dir / "auth"
    config_file = auth_dir / "nats.conf"
    _write_private(config_file, render_server_config(list(accounts.values())))
    summary = {name: {"user": a.user, "role": a.role, "nodes": list(a.nodes)} for name, a in accounts.items()}
    _write_private(auth_dir / "accounts.json", json.dumps(summary, indent=2))
    return StackAccounts(accounts=accounts, config_file=config_file)
