"""Logs and exec on a Docker engine (docs/node-agent.md "Logs and exec"): the engine's log stream and an exec's
attached output, read as Docker's multiplexed frames (containers eru creates have no TTY)."""

from __future__ import annotations

import codecs
from collections.abc import Sequence
from typing import Any

import aiodocker
import aiohttp
from aiodocker.exceptions import DockerError

from eru.nodeagent.attach import demux, stream_name
from eru.nodeagent.engine import engine_name
from eru_node_agent.runtime.base import ContainerMissing, EngineUnavailable, Output, RuntimeFailure

UNREACHABLE = 900
NO_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30)


def _failure(error: DockerError, container_id: str, what: str) -> Exception:
    if error.status == 404:
        return ContainerMissing(f"container {container_id} does not exist on this node")
    if error.status == UNREACHABLE:
        return EngineUnavailable(f"Docker engine unreachable: {error.message}")
    return RuntimeFailure(f"{what} failed: {error.message}")


class _Decoders:
    """One incremental UTF-8 decoder per stream: a character split across two frames is not broken."""

    def __init__(self) -> None:
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")(errors="replace") for name in ("stdout", "stderr")
        }

    def text(self, stream: str, data: bytes, final: bool = False) -> str:
        return str(self._decoders[stream].decode(data, final))


async def logs(
    docker: aiodocker.Docker, container_id: str, output: Output, *, follow: bool, tail: int | None
) -> int | None:
    """The engine's `GET /containers/{id}/logs` (stdout and stderr, followed until the container stops), then the
    exit code when the container is not running."""
    name = engine_name(container_id)
    params: dict[str, Any] = {"stdout": "1", "stderr": "1", "follow": "1" if follow else "0"}
    params["tail"] = "all" if tail is None else str(tail)
    decoders = _Decoders()
    try:
        async with docker._query(f"containers/{name}/logs", params=params, timeout=NO_TIMEOUT) as response:
            rest = b""
            async for data in response.content.iter_any():
                frames, rest = demux(rest + data)
                for number, payload in frames:
                    stream = stream_name(number)
                    text = decoders.text(stream, payload)
                    if text:
                        await output(stream, text)
        state = await docker._query_json(f"containers/{name}/json")
    except DockerError as error:
        raise _failure(error, container_id, "logs") from None
    except (aiohttp.ClientError, OSError) as error:
        raise EngineUnavailable(f"Docker engine unreachable: {type(error).__name__}: {error}") from None
    status = state.get("State") or {}
    if status.get("Running") or status.get("Status") in ("running", "restarting", "paused"):
        return None
    code = status.get("ExitCode")
    return int(code) if isinstance(code, int) else None


async def exec_in(docker: aiodocker.Docker, container_id: str, command: Sequence[str], output: Output) -> int:
    """`POST /containers/{id}/exec` and its start, attached: the output as it comes, then the exit code."""
    container = docker.containers.container(engine_name(container_id))
    decoders = _Decoders()
    try:
        execution = await container.exec(list(command), stdout=True, stderr=True)
        async with execution.start(detach=False) as stream:
            while (message := await stream.read_out()) is not None:
                name = stream_name(message.stream)
                text = decoders.text(name, message.data)
                if text:
                    await output(name, text)
        result = await execution.inspect()
    except DockerError as error:
        raise _failure(error, container_id, "exec") from None
    except (aiohttp.ClientError, OSError) as error:
        raise EngineUnavailable(f"Docker engine unreachable: {type(error).__name__}: {error}") from None
    code = result.get("ExitCode")
    return int(code) if isinstance(code, int) else -1
