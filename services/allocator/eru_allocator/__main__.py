"""`python -m eru_allocator` / `eru-allocator`: run one replica of the allocator service."""

from __future__ import annotations

import sys

from eru.service import run
from eru_allocator.app import service_main


def main() -> None:
    """Console-script entry point."""
    sys.exit(run("allocator", service_main, needs_store=True))


if __name__ == "__main__":
    main()
