"""The node agent's systemd unit (deploy/systemd/eru-node-agent.service, docs/deploy.md "Node agents under systemd")
passes `systemd-analyze verify` without a single warning — a misspelt key or a bad value is only a warning there,
so the output must be empty — and names what the agent needs: dockerd, the credentials file, restarts."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
UNIT = ROOT / "deploy" / "systemd" / "eru-node-agent.service"
EXAMPLE = ROOT / "deploy" / "systemd" / "node-agent.env.example"
INSTALLED = "/opt/eru/venv/bin/eru-node-agent"  # where docs/deploy.md installs eru


def verify(text: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`systemd-analyze verify` of a unit with this text, its ExecStart pointed at this checkout's agent (verify
    checks that the program exists; the installed path is the site's)."""
    binary = shutil.which("systemd-analyze")
    if binary is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    agent = Path(sys.executable).with_name("eru-node-agent")
    assert agent.exists(), agent
    unit = tmp_path / UNIT.name
    unit.write_text(text.replace(INSTALLED, str(agent)))
    return subprocess.run(
        [binary, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )


def test_the_unit_verifies_without_a_warning(tmp_path: Path) -> None:
    text = UNIT.read_text()
    assert f"ExecStart={INSTALLED}\n" in text
    done = verify(text, tmp_path)
    assert done.returncode == 0, done.stderr
    assert (done.stdout + done.stderr).strip() == ""


def test_a_broken_unit_is_caught(tmp_path: Path) -> None:
    """The check can fail: a bad value and a key in the wrong section are reported."""
    broken = UNIT.read_text().replace("Restart=always", "Restart=sometimes").replace("[Install]", "[Install]\nUser=x")
    done = verify(broken, tmp_path)
    output = done.stdout + done.stderr
    assert "sometimes" in output
    assert "User" in output


def test_the_unit_runs_beside_dockerd_with_its_credentials_file() -> None:
    lines = UNIT.read_text().splitlines()
    assert "Requires=docker.service" in lines
    assert "After=network-online.target docker.service" in lines
    assert "EnvironmentFile=/etc/eru/node-agent.env" in lines
    assert "Restart=always" in lines
    assert "SupplementaryGroups=docker" in lines
    example = EXAMPLE.read_text()
    for name in ("ERU_BUS__URL", "ERU_BUS__INBOX_PREFIX", "ERU_NODE_AGENT__NODE"):
        assert f"\n{name}=" in example
