"""`python -m eru_node_agent` / `eru-node-agent`: run one replica of the node-agent service."""

from __future__ import annotations

import sys

from eru.service import run
from eru_node_agent.app import service_main


def main() -> None:
    """Console-script entry point."""
    sys.exit(run("node-agent", service_main, needs_store=False))


if __name__ == "__main__":
    main()
