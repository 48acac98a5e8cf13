"""`python -m eru.compose secrets|client-env`: run on the machine that starts the stack (`make compose-secrets`,
`make compose-up`), never inside a container."""

from __future__ import annotations

import argparse
from pathlib import Path

from eru.compose import secrets
from eru.compose.topology import NETWORKS, Network
from eru.errors import EruError


def main(argv: list[str] | None = None) -> int:
    """Generate the secrets file, or write the client file for the running stack."""
    parser = argparse.ArgumentParser(prog="python -m eru.compose", description="The compose stack's credentials.")
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("secrets", help="write DIR/secrets.env (0600) unless it exists")
    make.add_argument("--dir", type=Path, default=Path(".compose"))
    ports = make.add_mutually_exclusive_group()
    ports.add_argument("--port-base", type=int, default=None, help="consecutive ports from here")
    ports.add_argument("--free-ports", action="store_true", help="ports free on loopback now (tests)")
    make.add_argument("--rotate", action="store_true", help="new passwords for everybody (ports kept)")
    client = commands.add_parser("client-env", help="write DIR/env: ERU_BUS_URL and ERU_CLIENT_URL (0600)")
    client.add_argument("--dir", type=Path, default=Path(".compose"))
    client.add_argument("--network", choices=NETWORKS, required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "secrets":
            base = None if args.free_ports else (args.port_base or secrets.DEFAULT_PORT_BASE)
            existed = (args.dir / secrets.SECRETS_FILE).exists()
            path = secrets.generate(args.dir, port_base=base, rotate=args.rotate)
            verb = "rotated" if args.rotate and existed else ("kept" if existed else "generated")
            print(f"{path}: {verb}")
        else:
            print(f"{secrets.write_client_env(args.dir, Network(args.network))}: written")
    except EruError as error:
        print(f"error: {error.message}")
        return 2
    return 0
