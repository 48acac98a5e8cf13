"""`python -m eru_eviction` / `eru-eviction`: run one replica of the eviction service."""

from __future__ import annotations

import sys

from eru.service import run
from eru_eviction.app import service_main


def main() -> None:
    """Console-script entry point."""
    sys.exit(run("eviction", service_main, needs_store=False))


if __name__ == "__main__":
    main()
