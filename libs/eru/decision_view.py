"""A recorded deploy decision as a person reads it: where the instances went and, for every node not chosen, why not
with the numbers (pure; used by the web console, docs/console.md).

The decision's input is the `eru plan` problem of kind `deploy` the allocator recorded (docs/replay.md), so the
numbers are recomputed from exactly what the allocator saw, with the same functions (`eru.planning.explain`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from eru.errors import EruError
from eru.planning import left_out
from eru.planning.capacity import analyse_nodes
from eru.planning.decide import stage
from eru.planning.explain import explain_node
from eru.planning.left_out import LeftOut
from eru.planning.request import NormalizedRequest, PlanningConfig, config_from_mapping, normalize_request
from eru.planning.resources import node_from_mapping

MAX_LISTED_NODES = 200
"""Nodes listed as not chosen (those left out before placement, then the lowest capacities); the rest are only
counted (`not_chosen_counts` counts every one)."""


def explain_deploy_decision(problem: Mapping[str, Any], output: Mapping[str, Any]) -> dict[str, Any]:
    """`{"placed": [{"node", "instances", "capacity", "numbers"}], "not_chosen": [{"node", "capacity", "reason",
    "why", "numbers"}], "not_chosen_total", "not_chosen_counts", "mode", "count", "error"}` of a recorded deploy
    decision (input `problem`, answer `output`); `numbers` are `explain_node`'s for every resource node, chosen or
    not, and the state's numbers for a node left out before placement.

    A node not chosen was left out before placement (`reason` `cordoned`, `down`, `forbid_watermark`, `avoided`;
    `capacity` null), had no room (`too_small`, the limiting resource with its numbers) or had room the placement
    mode did not use (`room_unused`). Docs/cli.md "eru explain" has the schema."""
    deploy = output.get("deploy") or {}
    capacity = output.get("capacity") or {}
    error = output.get("error")
    mode = str(problem.get("mode", "auto"))
    count = int(problem.get("count") or 0)
    raw_nodes = [raw for raw in problem.get("nodes") or [] if isinstance(raw, Mapping)]
    numbers, needs = _node_numbers(problem, raw_nodes)
    placed = [
        {"node": name, "instances": int(n), "capacity": int(capacity.get(name, 0)), "numbers": numbers.get(name, {})}
        for name, n in sorted(deploy.items())
        if int(n) > 0
    ]
    chosen = {entry["node"] for entry in placed}
    if isinstance(error, Mapping):
        resources = (error.get("details") or {}).get("resources") or {}
        numbers = {**numbers, **{str(name): dict(e) for name, e in resources.items() if isinstance(e, Mapping)}}
    not_chosen: list[dict[str, Any]] = [
        {**entry.to_dict(), "capacity": None} for entry in _left_out(problem) if entry.node not in chosen
    ]
    others = []
    for raw in raw_nodes:
        name = str(raw.get("name", ""))
        if not name or name in chosen:
            continue
        room = int(capacity.get(name, numbers.get(name, {}).get("capacity", 0)) or 0)
        entry = numbers.get(name, {})
        if room > 0:
            why = f"room for {room} instance{'s' if room != 1 else ''}; mode {mode} placed them elsewhere"
            others.append({"node": name, "reason": "room_unused", "why": why, "numbers": dict(entry), "capacity": room})
        else:
            small = left_out.too_small(name, entry, *needs).to_dict()
            others.append({**small, "capacity": 0})
    others.sort(key=lambda item: (item["capacity"], item["node"]))
    not_chosen += others
    counted: dict[str, int] = {}
    for item in not_chosen:
        counted[item["reason"]] = counted.get(item["reason"], 0) + 1
    return {
        "mode": mode,
        "count": count,
        "placed": placed,
        "not_chosen": not_chosen[:MAX_LISTED_NODES],
        "not_chosen_total": len(not_chosen),
        "not_chosen_counts": counted,
        "error": dict(error) if isinstance(error, Mapping) else None,
    }


def _left_out(problem: Mapping[str, Any]) -> list[LeftOut]:
    """The nodes the recorded decision left out before placement, with their reasons, as the decision's own first
    step finds them (`eru.planning.decide.stage` over the problem); none when the problem cannot be read."""
    from eru.plan_api import deploy_problem

    try:
        snapshot, ask = deploy_problem(problem)
        return list(stage(snapshot, ask).left_out)
    except (EruError, KeyError, TypeError, ValueError):
        return []


def _node_numbers(
    problem: Mapping[str, Any], raw_nodes: list[Mapping[str, Any]]
) -> tuple[dict[str, dict[str, Any]], tuple[float, int]]:
    """Per resource node, `explain_node`'s numbers, and what one instance needs (cores, memory bytes); empty and
    nothing when the problem cannot be read (a capacity-only problem, or an input that no longer validates; the
    answer's capacities are still shown)."""
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
        }, _needs(request, config)
    except (EruError, KeyError, TypeError, ValueError):
        return {}, (0.0, 0)


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


def _needs(request: NormalizedRequest, config: PlanningConfig) -> tuple[float, int]:
    return request.cpu_request / config.share_base, request.memory_request
