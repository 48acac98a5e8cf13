"""The deploy request `eru deploy` builds from its options, and which option each of its fields comes from: a refused
field is named as the user typed it (`--image`, not `workload.image`; never the workload name eru derived from the
image — docs/cli.md "Limits")."""

from __future__ import annotations

from typing import Any

from eru.cli.bus_client import refuse_invalid
from eru.cli.failure import typed_as
from eru.cli.node_filter_options import FILTER_OPTIONS


def deploy_request(**fields: Any) -> Any:
    """The `DeployRequest` of `eru deploy`'s options; an invalid one fails with one line naming the option (exit 2).
    From here on, a refusal the allocator answers names the option too (`mode: …` → `--mode: …`)."""
    from pydantic import ValidationError

    from eru.domain import DeployRequest
    from eru.errors import InvalidInput

    typed_as(DEPLOY_OPTIONS)
    try:
        _check_locally(fields)
    except InvalidInput as error:
        refuse_invalid(error, DEPLOY_OPTIONS)
    workload: dict[str, Any] = {
        "name": fields["name"] or _name_of(fields["image"]),
        "image": fields["image"],
        "priority_class": fields["priority_class"],
        "tenant": fields["tenant"],
        "resources": {
            "cpu_bind": fields["cpu_bind"],
            "cpu_request": fields["cpu"],
            "cpu_limit": fields["cpu_limit"],
            "memory_request": fields["memory"],
            "memory_limit": fields["memory_limit"],
        },
    }
    if fields["command"]:
        workload["command"] = fields["command"].split()
    _health(workload, fields)
    if fields.get("max_unavailable") is not None:
        count, percent = _max_unavailable(fields["max_unavailable"])
        workload["eviction_budget"] = {"max_unavailable": count if count is not None else f"{percent}%"}
    try:
        return DeployRequest.model_validate(
            {
                "pod": fields["pod"],
                "workload": workload,
                "count": fields["count"],
                "mode": fields["mode"],
                "nodes_limit": fields["nodes_limit"],
                "request_id": fields["request_id"],
                "wait_seconds": fields["wait_seconds"],
                "keep": fields.get("keep", False),
                "node_filter": fields.get("node_filter"),
            }
        )
    except ValidationError as error:
        refuse_invalid(error, DEPLOY_OPTIONS)


def _check_locally(fields: dict[str, Any]) -> None:
    """What the allocator would refuse and the CLI can tell alone: an unknown placement mode, a `--max-unavailable`
    that is neither N nor N%."""
    from eru.bounded import clip
    from eru.errors import InvalidInput
    from eru.planning.modes import mode_names

    mode = fields["mode"]
    if mode not in mode_names():
        raise InvalidInput("mode", f"unknown placement mode {clip(mode)!r} (known: {', '.join(mode_names())})")
    if fields.get("max_unavailable") is not None:
        _max_unavailable(fields["max_unavailable"])


def _max_unavailable(text: str) -> tuple[int | None, int | None]:
    """`--max-unavailable` as (count, percent), checked as the allocator checks it (eru.colocation.budget)."""
    from eru.colocation.budget import parse_max_unavailable

    return parse_max_unavailable(text, "workload.eviction_budget.max_unavailable")


DEPLOY_OPTIONS = {
    "pod": "--pod",
    "workload.image": "--image",
    "workload.name": "--name",
    "workload.tenant": "--tenant",
    "workload.command": "--command",
    "workload.priority_class": "--class",
    "workload.eviction_budget": "--max-unavailable",
    "workload.resources.cpu_bind": "--cpu-bind",
    "workload.resources.cpu_request": "--cpu",
    "workload.resources.cpu_limit": "--cpu-limit",
    "workload.resources.memory_request": "--memory",
    "workload.resources.memory_limit": "--memory-limit",
    "workload.health_command": "--health-cmd",
    "workload.health_interval_seconds": "--health-interval",
    "workload.health_retries": "--health-retries",
    "count": "--count",
    "mode": "--mode",
    "nodes_limit": "--nodes-limit",
    "request_id": "--request-id",
    "wait_seconds": "--wait-seconds",
    **FILTER_OPTIONS,
}
"""The option behind each field of the deploy request, for errors (docs/cli.md "Limits")."""


def _health(workload: dict[str, Any], fields: dict[str, Any]) -> None:
    """The health check options (`--health-cmd` split as a shell would, run without one; docs/node-agent.md "Health
    and node TTL")."""
    import shlex

    from eru.cli.bus_client import fail
    from eru.errors import InvalidInput
    from eru.units import parse_seconds

    text = fields.get("health_cmd")
    if not text:
        return
    try:
        workload["health_command"] = shlex.split(text)
        workload["health_interval_seconds"] = parse_seconds(fields.get("health_interval", "5s"), "--health-interval")
    except InvalidInput as error:
        fail(f"{error.field}: {error.reason}", code=2)
    except ValueError as error:  # shlex: "No closing quotation"
        fail(f"--health-cmd: {error}", code=2)
    workload["health_retries"] = fields.get("health_retries", 3)


def _name_of(image: str) -> str:
    """The workload name derived from an image (`registry/team/web:1` → `web`): always a valid name, so that only
    the image itself is ever blamed for it (at most `NAME_MAX` characters)."""
    from eru.domain.limits import NAME_MAX

    base = image.rsplit("/", 1)[-1].split(":", 1)[0].split("@", 1)[0]
    cleaned = "".join(c if c.isascii() and (c.isalnum() or c in "-_") else "-" for c in base[: NAME_MAX * 2])
    return cleaned[:NAME_MAX].strip("-_") or "workload"
