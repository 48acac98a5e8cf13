"""A recorded deploy decision as a person reads it: where the instances went and, for every node not chosen, why not
with the numbers (pure; used by the web console, docs/console.md).

The decision's input is the `eru plan` problem of kind `deploy` the allocator recorded (docs/replay.md), so the
numbers are recomputed from exactly what the allocator saw, with the same functions (`eru.planning.explain`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eru.errors import EruError
from eru.planning.capacity import analyse_nodes
from eru.planning.explain import explain_node
from eru.planning.request import config_from_mapping, normalize_request
from eru.planning.resources import node_from_mapping

MAX_LISTED_NODES = 200
"""Nodes listed as not chosen (the lowest capacities first); the rest are only counted."""


def explain_deploy_decision(problem: Mapping[str, Any], output: Mapping[str, Any]) -> dict[str, Any]:
    """`{"placed": [{"node", "instances", "capacity", "numbers"}], "not_chosen": [{"node", "capacity", "why",
    "numbers"}], "not_chosen_total", "mode", "count", "error"}` of a recorded deploy decision (input `problem`,
    answer `output`); `numbers` are `explain_node`'s for every node, chosen or not.

    A node not chosen either had no room (`why` names the limiting resource, `numbers` are `explain_node`'s) or had
    room the placement mode did not use (`why` says how much)."""
    deploy = output.get("deploy") or {}
    capacity = output.get("capacity") or {}
    error = output.get("error")
    mode = str(problem.get("mode", "auto"))
    count = int(problem.get("count") or 0)
    raw_nodes = [raw for raw in problem.get("nodes") or [] if isinstance(raw, Mapping)]
    numbers = _node_numbers(problem, raw_nodes)
    placed = [
        {"node": name, "instances": int(n), "capacity": int(capacity.get(name, 0)), "numbers": numbers.get(name, {})}
        for name, n in sorted(deploy.items())
        if int(n) > 0
    ]
    chosen = {entry["node"] for entry in placed}
    if isinstance(error, Mapping):
        resources = (error.get("details") or {}).get("resources") or {}
        numbers = {**numbers, **{str(name): dict(e) for name, e in resources.items() if isinstance(e, Mapping)}}
    not_chosen = []
    for raw in raw_nodes:
        name = str(raw.get("name", ""))
        if not name or name in chosen:
            continue
        room = int(capacity.get(name, numbers.get(name, {}).get("capacity", 0)) or 0)
        entry = numbers.get(name, {})
        if room > 0:
            why = f"room for {room} instance{'s' if room != 1 else ''}; mode {mode} placed them elsewhere"
        else:
            why = _why_no_room(entry)
        not_chosen.append({"node": name, "capacity": room, "why": why, "numbers": dict(entry)})
    not_chosen.sort(key=lambda item: (item["capacity"], item["node"]))
    return {
        "mode": mode,
        "count": count,
        "placed": placed,
        "not_chosen": not_chosen[:MAX_LISTED_NODES],
        "not_chosen_total": len(not_chosen),
        "error": dict(error) if isinstance(error, Mapping) else None,
    }


def _node_numbers(problem: Mapping[str, Any], raw_nodes: list[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per resource node, `explain_node`'s numbers (empty when the problem cannot be read: a capacity-only problem,
    or an input that no longer validates; the answer's capacities are still shown)."""
    try:
        config = config_from_mapping(problem.get("config"))
        request = normalize_request(problem.get("request", {}), config)
        if problem.get("priority_class", "prod") == "batch":
            from dataclasses import replace

            request = replace(request, batch=True)
        nodes = [
            node_from_mapping(raw, f"nodes[{index}]", config.share_base)
            for index, raw in enumerate(raw_nodes)
            if "capacity" not in raw
        ]
        analyses = analyse_nodes(nodes, request, config)
        return {
            node.name: explain_node(node, request, config, analysis.capacity)
            for node, analysis in zip(nodes, analyses, strict=True)
        }
    except (EruError, KeyError, TypeError, ValueError):
        return {}


def _why_no_room(entry: Mapping[str, Any]) -> str:
    limited = entry.get("limited_by")
    if limited == "cpu":
        return f"no room: {entry.get('free_cpu', '?')} cores free, not enough for one instance (cpu)"
    if limited == "memory":
        return f"no room: {_bytes(entry.get('free_memory'))} memory free, not enough for one instance (memory)"
    if limited == "cores":
        return f"no room: {entry.get('cores')} cores, the request needs {entry.get('cores_needed')} (cores)"
    if limited in ("batch_cpu", "batch_memory"):
        allowance = entry.get("batch_allowance") or {}
        return f"no room: the batch allowance is used up ({limited}: {allowance})"
    return "no room"


def _bytes(value: Any) -> str:
    from eru.units import format_bytes

    return format_bytes(int(value)) if isinstance(value, int) else "?"


def explain_eviction_event(body: Mapping[str, Any]) -> dict[str, Any]:
    """A recorded eviction decision (an `EvictionDecision` event body, `eru.eviction.<node>`) as a person reads it:
    `eru.colocation.explain.explain_eviction` of its recorded input, plus what the event recorded (`recorded`:
    kind, reason, victims, refused) and whether the recomputed victims are the recorded ones (`same`; a victim
    refused by a lost budget claim, rule `budget-claim`, is the one documented exception)."""
    from eru.colocation.explain import explain_eviction
    from eru.errors import InvalidInput

    problem = body.get("input")
    if not isinstance(problem, Mapping) or not problem:
        raise InvalidInput("input", "this eviction event carries no recorded input to explain")
    view = explain_eviction(problem)
    victims = [v.get("container_id") for v in body.get("victims") or [] if isinstance(v, Mapping)]
    refused = [r for r in body.get("refused") or [] if isinstance(r, Mapping)]
    recomputed = [v["id"] for v in view["evict"]]
    claim_lost = any(r.get("rule") == "budget-claim" for r in refused)
    kind = str(body.get("kind", ""))
    same = recomputed == victims if kind == "evict" or victims else True
    return {
        "node": body.get("node"),
        "time": body.get("time"),
        "event_kind": kind,
        "recorded": {"reason": body.get("reason"), "victims": victims, "refused": refused},
        "same": same or claim_lost,
        **view,
    }
