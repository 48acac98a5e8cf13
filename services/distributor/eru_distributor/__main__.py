"""`python -m eru_distributor` / `eru-distributor`: run one replica of the distributor service."""

from __future__ import annotations

import sys

from eru.service import run
from eru_distributor.app import service_main


def main() -> None:
    """Console-script entry point."""
    sys.exit(run("distributor", service_main, needs_store=False))


if __name__ == "__main__":
    main()
