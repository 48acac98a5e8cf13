"""A tiny image built locally (there is no registry to pull from): the one `eru demo` deploys on a Docker node and the
docker-marked tests run (their engine fixtures are in `eru.testing.pytest_docker`).

The image is `docker import` of a rootfs holding Debian's static busybox (`busybox-static`) as `/bin/busybox` with
links for the applets the tests use (`sh`, `sleep`, `yes`, `cat`, …): about 2 MB, built in a second.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import aiodocker
from aiodocker.exceptions import DockerError

from eru.embedded.machine_lock import machine_lock_async

TEST_IMAGE = "eru-test/busybox:1"
APPLETS = ("sh", "sleep", "yes", "cat", "true", "false", "echo", "ls", "test", "kill", "grep")
BUSYBOX_CANDIDATES = (Path("/bin/busybox"), Path("/usr/bin/busybox"))


def is_static_elf(data: bytes) -> bool:
    """True for a 64-bit little-endian ELF without a program interpreter (PT_INTERP), i.e. statically linked."""
    if len(data) < 64 or not data.startswith(b"\x7fELF\x02\x01"):
        return False
    phoff = int.from_bytes(data[0x20:0x28], "little")
    entry_size = int.from_bytes(data[0x36:0x38], "little")
    count = int.from_bytes(data[0x38:0x3A], "little")
    pt_interp = 3
    return all(
        int.from_bytes(data[phoff + i * entry_size : phoff + i * entry_size + 4], "little") != pt_interp
        for i in range(count)
    )


def find_static_busybox() -> Path | None:
    """A statically linked busybox on this machine (Debian's busybox-static), or None."""
    for candidate in BUSYBOX_CANDIDATES:
        if candidate.is_file() and is_static_elf(candidate.read_bytes()):
            return candidate
    return None


def rootfs_tar(busybox: Path) -> bytes:
    """A tarball of a minimal rootfs: /bin/busybox, its applet links, and the directories a container needs."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for directory in ("bin", "tmp", "proc", "sys", "dev", "etc"):
            info = tarfile.TarInfo(directory)
            info.type = tarfile.DIRTYPE
            info.mode = 0o1777 if directory == "tmp" else 0o755
            tar.addfile(info)
        data = busybox.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size = len(data)
        info.mode = 0o755
        tar.addfile(info, io.BytesIO(data))
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type = tarfile.SYMTYPE
            link.linkname = "busybox"
            tar.addfile(link)
    return buffer.getvalue()


async def engine_problem(url: str | None = None) -> str | None:
    """None when a Docker engine answers, else why not."""
    try:
        docker = aiodocker.Docker(url=url)
    except Exception as error:
        return f"no Docker socket ({error})"
    try:
        await docker.system.info()
    except Exception as error:
        return f"the Docker engine does not answer ({error})"
    finally:
        await docker.close()
    return None


async def ensure_test_image(tag: str = TEST_IMAGE, url: str | None = None) -> str:
    """Import the busybox test image unless the engine already has it; returns its tag.

    Under a machine-wide lock: two processes (parallel test workers) that both find it missing import it once.
    """
    async with machine_lock_async("test-image"):
        return await _ensure_test_image(tag, url)


async def _ensure_test_image(tag: str, url: str | None) -> str:
    docker = aiodocker.Docker(url=url)
    try:
        try:
            await docker.images.inspect(tag)
            return tag
        except DockerError as error:
            if error.status != 404:
                raise
        busybox = find_static_busybox()
        if busybox is None:
            raise RuntimeError("no static busybox found (install Debian's busybox-static)")
        repo, _, version = tag.partition(":")
        params: dict[str, Any] = {"fromSrc": "-", "repo": repo, "tag": version or "latest"}
        async with docker._query(
            "images/create",
            "POST",
            params=params,
            data=rootfs_tar(busybox),
            headers={"Content-Type": "application/x-tar"},
        ) as response:
            await response.read()
        await docker.images.inspect(tag)
        return tag
    finally:
        await docker.close()
