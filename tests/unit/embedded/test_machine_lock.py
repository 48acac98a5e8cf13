"""`machine_lock`: one process at a time on this machine (parallel test workers importing the test image, creating
the PostgreSQL account, starting dockerd)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import subprocess
import sys
import uuid

import pytest

from eru.embedded.machine_lock import lock_path, machine_lock, machine_lock_async

HOLDER = (
    "import sys\n"
    "from eru.embedded.machine_lock import machine_lock\n"
    "with machine_lock(sys.argv[1]):\n"
    "    print('held', flush=True)\n"
    "    sys.stdin.readline()\n"
)


def _free_now(name: str) -> bool:
    """True when nobody holds the lock (probes without waiting)."""
    fd = os.open(lock_path(name), os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


def test_a_lock_held_by_another_process_is_not_free_until_it_lets_go() -> None:
    name = f"test-{uuid.uuid4().hex[:10]}"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        assert holder.stdout.readline().strip() == "held"
        assert not _free_now(name)
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.wait(30) == 0
        with machine_lock(name):
            assert not _free_now(name)
        assert _free_now(name)
    finally:
        holder.kill()
        holder.wait()
        lock_path(name).unlink(missing_ok=True)


async def test_the_async_lock_excludes_the_sync_one_and_is_released_on_error() -> None:
    name = f"test-{uuid.uuid4().hex[:10]}"
    try:
        held: list[bool] = []

        async def fail_inside() -> None:
            async with machine_lock_async(name):
                held.append(not await asyncio.to_thread(_free_now, name))
                raise RuntimeError("inside")

        with pytest.raises(RuntimeError, match="inside"):
            await fail_inside()
        assert held == [True]
        assert _free_now(name)
    finally:
        lock_path(name).unlink(missing_ok=True)
