"""`python -m eru_node_agent` / `eru-node-agent`: run the node agent.

`eru-node-agent` serves the local Docker engine as node `ERU_NODE_AGENT__NODE` (default: the host name);
`eru-node-agent --sim --nodes 200` serves 200 simulated nodes in one process. Options override the environment.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from eru.service import run
from eru_node_agent.app import service_main


def parse_overrides(argv: list[str]) -> dict[str, Any]:
    """Command-line options as settings overrides (only the options given)."""
    parser = argparse.ArgumentParser(prog="eru-node-agent", description="eru node agent (docker or simulated)")
    parser.add_argument("--sim", action="store_true", help="simulated runtime instead of Docker")
    parser.add_argument("--nodes", type=int, help="how many simulated nodes this process serves (implies --sim)")
    parser.add_argument("--node", help="node name (with several simulated nodes: their name prefix)")
    parser.add_argument("--pod", help="pod the node(s) register in")
    parser.add_argument("--seed", type=int, help="seed of the simulated load models")
    parser.add_argument("--metrics-interval", type=float, help="seconds between metrics samples (>= 1)")
    args = parser.parse_args(argv)
    node_agent: dict[str, Any] = {}
    if args.sim or args.nodes is not None:
        node_agent["runtime"] = "sim"
    if args.nodes is not None:
        node_agent["sim_nodes"] = args.nodes
    if args.node is not None:
        node_agent["node"] = args.node
    if args.pod is not None:
        node_agent["pod"] = args.pod
    if args.seed is not None:
        node_agent["sim_seed"] = args.seed
    if args.metrics_interval is not None:
        node_agent["metrics_interval_seconds"] = args.metrics_interval
    return {"node_agent": node_agent} if node_agent else {}


def main() -> None:
    """Console-script entry point."""
    sys.exit(run("node-agent", service_main, needs_store=False, **parse_overrides(sys.argv[1:])))


if __name__ == "__main__":
    main()
