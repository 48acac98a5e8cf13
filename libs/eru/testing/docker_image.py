"""The Docker side of the tests: starting an engine and removing what a test's containers left behind. The image
they run comes from `eru.embedded.docker_image` (re-exported here for the fixtures and benches)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import aiodocker
from aiodocker.exceptions import DockerError

from eru.embedded.docker_image import TEST_IMAGE, engine_problem, ensure_test_image
from eru.embedded.machine_lock import machine_lock

__all__ = ["TEST_IMAGE", "engine_problem", "ensure_test_image", "remove_containers", "start_engine"]

REPO_ROOT = Path(__file__).resolve().parents[3]


def start_engine() -> str:
    """Run scripts/start-dockerd.sh (starts dockerd when root and not running); its output."""
    script = REPO_ROOT / "scripts" / "start-dockerd.sh"
    if not script.is_file():
        return f"{script} not found"
    with machine_lock("dockerd"):  # parallel test workers: one starts it, the other then finds it running
        result = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=90, env=dict(os.environ))
    return (result.stdout + result.stderr).strip()


async def remove_containers(label: str, value: str, url: str | None = None) -> int:
    """Force-remove every container whose `label` is `value`; how many there were."""
    docker = aiodocker.Docker(url=url)
    try:
        filters = json.dumps({"label": [f"{label}={value}"]})
        rows = await docker._query_json("containers/json", params={"all": "true", "filters": filters})
        for row in rows:
            try:
                await docker._query_json(f"containers/{row['Id']}", "DELETE", params={"force": "true"})
            except DockerError as error:
                if error.status != 404:
                    raise
        return len(rows)
    finally:
        await docker.close()
