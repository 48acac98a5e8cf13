"""A bad setting in the environment is one line naming it, exit 2 — never a traceback — for the verbs that read the
settings (`eru gc`, the storage part of `eru status`): as a person types them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("name", "value", "named"),
    [
        ("ERU_LOG_MAX_BYTES", "10", "log_max_bytes (env ERU_LOG_MAX_BYTES): must be at least 64 KiB"),
        ("ERU_STREAM_MAX_BYTES", "notjson", "stream_max_bytes (env ERU_STREAM_MAX_BYTES): not valid JSON"),
        ("ERU_RETENTION_SECONDS", "soon", "retention_seconds (env ERU_RETENTION_SECONDS)"),
    ],
)
def test_eru_gc_names_a_bad_setting(tmp_path: object, name: str, value: str, named: str) -> None:
    env = {**os.environ, name: value, "COLUMNS": "200"}
    args = ["gc", "--dry-run", "--database", "postgresql://eru@127.0.0.1:9/none", "--state-dir", str(tmp_path)]
    done = subprocess.run([sys.executable, "-m", "eru.cli", *args], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 2, done.stderr
    assert named in done.stderr
    assert "Traceback" not in done.stderr
