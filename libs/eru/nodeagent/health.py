"""Container health checks (docs/node-agent.md "Health and node TTL"): pure rules, no I/O.

A workload with a `health_command` is checked every `health_interval_seconds` (the command may take as long);
`health_retries` failures in a row make it `unhealthy`, one success `healthy`; until the first check has answered it
is `starting`. On Docker the engine runs the check (the container's `Healthcheck`, built here) and the agent reads
the state from the engine's listing; the sim runtime models the same rule over its clock (`modelled_health`).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from eru.domain.messages import Workload

Health = Literal["starting", "healthy", "unhealthy"]
NANOSECONDS = 1_000_000_000
# the health part of a Docker listing's status text: "Up 3 seconds (healthy)", "Up 1 second (health: starting)"
LISTED = re.compile(r"\((healthy|unhealthy|health: starting)\)\s*$")


def docker_healthcheck(workload: Workload) -> dict[str, Any] | None:
    """The container config's `Healthcheck` for the workload's health command (None: it has none). The command is
    executed as given (`CMD`, no shell), each run may take the interval, failures count from the first run (no
    start period)."""
    if not workload.health_command:
        return None
    interval = int(workload.health_interval_seconds * NANOSECONDS)
    return {
        "Test": ["CMD", *workload.health_command],
        "Interval": interval,
        "Timeout": interval,
        "Retries": workload.health_retries,
        "StartPeriod": 0,
    }


def listed_health(status: str) -> Health | None:
    """The health in a Docker listing's status text (None: the container has no health check or is not running)."""
    match = LISTED.search(status)
    if match is None:
        return None
    word = match.group(1)
    return "starting" if word == "health: starting" else "healthy" if word == "healthy" else "unhealthy"


def modelled_health(running_seconds: float, interval_seconds: float, retries: int, failing: bool) -> Health:
    """The sim runtime's health of a container that has run `running_seconds`: the first check answers after one
    interval (healthy, unless `failing`), a failing one turns unhealthy at its `retries`-th check."""
    checks = int(running_seconds // interval_seconds)
    if not failing:
        return "healthy" if checks >= 1 else "starting"
    return "unhealthy" if checks >= retries else "starting"


def fails_health(label: str | None, image: str) -> bool:
    """The sim runtime's `eru.sim.unhealthy` label: `true` fails every health check of the workload, a
    comma-separated list of images fails it on those images only (`app:2,app:3`: a bad release to roll back)."""
    if not label:
        return False
    return label == "true" or image in {part.strip() for part in label.split(",")}
