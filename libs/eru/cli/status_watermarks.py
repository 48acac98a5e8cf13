"""The watermarks part of `eru status` (docs/cli.md, docs/colocation.md "Watermarks set live"): the watermarks the
eviction replicas' environment gives (each replica tells them in its `$SRV.INFO` metadata) and every live override
the allocator holds (`query watermarks`). With no stack or no allocator answering it says so and never fails."""

from __future__ import annotations

from typing import Any

from eru.errors import EruError


async def _overrides(url: str, timeout: float) -> list[dict[str, Any]]:  # noqa: ASYNC109 - one request
    from eru.bus.connection import connect
    from eru.cli.bus_client import query_all
    from eru.domain.messages import QueryRequest

    nc = await connect(url, name="eru-status", connect_timeout=timeout)
    try:
        reply = await query_all(nc, QueryRequest(what="watermarks"), timeout)
        return list(reply.rows)
    finally:
        await nc.close()


def environment_of(replicas: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The watermarks the eviction replicas' environment gives (the first replica's; the replicas of one stack share
    their environment), None when no replica told them."""
    for row in sorted(replicas, key=lambda r: str(r.get("replica"))):
        if row.get("service") == "eviction" and isinstance(row.get("watermarks"), dict):
            return dict(row["watermarks"])
    return None


def watermarks_part(url: str | None, replicas: list[dict[str, Any]], timeout: float, bus_up: bool) -> dict[str, Any]:
    """`{"state": "known" | "unavailable", "detail", "environment", "overrides"}`: overrides with settings only
    (a cleared one is left out), each `{"scope", "name", "settings", "version"}`, nodes before pods."""
    from eru.cli.bus_client import run_async
    from eru.redaction import redact_text

    environment = environment_of(replicas)
    part: dict[str, Any] = {"state": "unavailable", "detail": "", "environment": environment, "overrides": []}
    if url is None or not bus_up:
        part["detail"] = "no bus: the overrides are unknown"
        return part
    try:
        rows = run_async(_overrides(url, timeout))
    except EruError as error:
        part["detail"] = f"the allocator did not list the overrides: {redact_text(error.message)}"
        return part
    overrides = [
        {"scope": r["scope"], "name": r["name"], "settings": dict(r["settings"]), "version": int(r["version"])}
        for r in rows
        if r.get("settings")
    ]
    part["overrides"] = sorted(overrides, key=lambda o: (o["scope"] != "node", o["scope"], o["name"]))
    part["state"] = "known"
    if environment is None:
        part["detail"] = "no eviction replica told its environment's watermarks"
    return part


def _settings(values: dict[str, Any]) -> str:
    """`cpu_forbid=65 cpu_evict=80`, in the order of docs/colocation.md's table (watermarks first)."""
    from eru.colocation.overrides import LIVE_FIELDS

    order = {name: index for index, name in enumerate(LIVE_FIELDS)}
    keys = sorted(values, key=lambda key: (order.get(key, len(order)), key))
    return " ".join(f"{key}={values[key]}" for key in keys) or "-"


def print_watermarks(part: dict[str, Any], console: Any) -> None:
    """The part as a few lines under the status table."""
    environment = part.get("environment")
    if environment is not None:
        console.print(f"watermarks (environment): {_settings(environment.get('defaults') or {})}", highlight=False)
        for scope, label in (("pods", "pod"), ("nodes", "node")):
            for name, values in (environment.get(scope) or {}).items():
                console.print(f"  {label} {name} (environment): {_settings(values)}", highlight=False)
    else:
        console.print("watermarks (environment): unknown (no eviction replica told them)", highlight=False)
    if part["state"] != "known":
        console.print(f"watermark overrides: unknown ({part['detail']})", highlight=False)
        return
    if not part["overrides"]:
        console.print("watermark overrides: none", highlight=False)
        return
    console.print("watermark overrides (node > pod > environment):", highlight=False)
    for override in part["overrides"]:
        line = f"  {override['scope']} {override['name']}: {_settings(override['settings'])}"
        console.print(f"{line} (version {override['version']})", highlight=False)
