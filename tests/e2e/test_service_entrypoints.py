"""Each service's process entry point: bad configuration and unreachable servers are one clear line, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from eru.testing.nats_server import free_port

SERVICES = ["eru_allocator", "eru_distributor", "eru_node_agent", "eru_eviction"]


def _run(module: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ERU_BUS__CONNECT_TIMEOUT_SECONDS": "0.5", **env},
    )


@pytest.mark.parametrize("module", SERVICES)
def test_a_malformed_setting_is_named_with_exit_code_2(module: str) -> None:
    result = _run(module, ERU_DRAIN_TIMEOUT_SECONDS="soon")
    assert result.returncode == 2, result.stderr
    assert "drain_timeout_seconds" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("module", SERVICES)
def test_an_unreachable_bus_is_named_with_exit_code_3(module: str) -> None:
    url = f"nats://127.0.0.1:{free_port()}"
    result = _run(module, ERU_BUS__URL=url, ERU_NODE_AGENT__RUNTIME="sim")
    assert result.returncode == 3, result.stderr
    assert "127.0.0.1" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_unreadable_tls_file_is_named_with_exit_code_2() -> None:
    result = _run("eru_distributor", ERU_BUS__TLS_CA_FILE="/nonexistent/ca.pem")
    assert result.returncode == 2, result.stderr
    assert "bus.tls_ca_file" in result.stderr
    assert "Traceback" not in result.stderr
