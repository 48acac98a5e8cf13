"""A lock held across processes on this machine (`flock` on a file in the temporary directory), for the one-off steps
two processes may take at once: importing the test image, creating the embedded PostgreSQL's system account,
starting dockerd. Parallel test workers (`pytest -n 2`, docs/testing.md) and two `eru` commands meet there.

The kernel releases the lock when its holder exits, so a killed process never leaves it held.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path


def lock_path(name: str) -> Path:
    """The file the lock `name` is taken on: `<tmp>/eru-<name>.lock`."""
    return Path(tempfile.gettempdir()) / f"eru-{name}.lock"


def _open(name: str) -> int:
    # read-only is enough for flock, so a lock file another account created (mode 0644) still serves
    return os.open(lock_path(name), os.O_RDONLY | os.O_CREAT, 0o644)


@contextlib.contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Hold the machine-wide lock `name` for the block (waits while another process holds it)."""
    fd = _open(name)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@contextlib.asynccontextmanager
async def machine_lock_async(name: str) -> AsyncIterator[None]:
    """`machine_lock` for coroutines: the wait runs in a thread, so the event loop keeps running meanwhile."""
    fd = _open(name)
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
