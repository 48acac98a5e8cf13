"""What the console pages show, computed from allocator rows and bus messages (docs/console.md)."""

from __future__ import annotations

from typing import Any

from eru.console.views import core_map, deploy_progress, eviction_summary, matches, node_card, page, service_rows
from eru.decision_view import explain_deploy_decision

GIB = 1024**3


def _container(cid: str, cpu_map: dict[str, int], state: str = "running", **extra: Any) -> dict[str, Any]:
    return {"id": cid, "workload": "web", "class": "prod", "state": state, "allocation": {"cpu_map": cpu_map}, **extra}


def test_core_map_shows_whole_cores_fragments_and_free_pieces_in_core_order() -> None:
    cpu_map = {str(i): 100 for i in range(11)}
    cores = core_map(cpu_map, [_container("a", {"10": 100, "2": 100}), _container("b", {"0": 50, "1": 100})], 100)
    assert [c["core"] for c in cores] == [str(i) for i in range(11)]  # 10 after 9, not after 1
    assert cores[0]["holders"] == [{"id": "b", "workload": "web", "class": "prod", "pieces": 50, "whole": False}]
    assert cores[0]["free"] == 50
    assert [h["id"] for h in cores[10]["holders"]] == ["a"]
    assert cores[10]["holders"][0]["whole"]
    assert cores[3]["holders"] == []
    assert cores[3]["free"] == 100


def test_node_card_draws_live_containers_watermarks_and_usage() -> None:
    row = {
        "name": "n1",
        "pod": "p",
        "state": "up",
        "cordoned": True,
        "share_base": 100,
        "cpu_map": {"0": 100, "1": 100},
        "used_cpu_map": {"0": 100},
        "memory": 8 * GIB,
        "used_memory": 2 * GIB,
        "conditions": {
            "state": "forbid",
            "forbid_schedule_cpu": True,
            "cpu_percent": 70.0,
            "batch_cpu_capacity": 0.5,
            "watermarks": {
                "cpu_forbid": 65,
                "cpu_suppress": 70,
                "cpu_evict": 80,
                "memory_forbid": 60,
                "memory_evict": 75,
            },
        },
    }
    gone = _container("old", {"1": 100}, state="removed")
    shared = {
        "id": "m",
        "workload": "batchy",
        "class": "batch",
        "state": "running",
        "allocation": {},
        "resources": {"cpu_request": 0.5},
    }
    card = node_card(row, [_container("a", {"0": 100}), gone, shared], {"cpu_percent": 55.5, "memory_percent": 10.0})
    assert card["cores"][1]["holders"] == []  # a removed container holds nothing
    assert card["shared"] == [{"id": "m", "workload": "batchy", "class": "batch", "cpu": 0.5}]
    assert card["cpu"] == {"capacity": 2.0, "reserved": 1.0, "bound": 1.0, "requested": None}
    # the allocator's requested CPU (bound or not) is shown beside the bound cores, above capacity when oversold
    assert node_card({**row, "cpu_requested": 3.5}, [], None)["cpu"]["requested"] == 3.5
    assert card["usage"]["cpu_percent"] == 55.5  # the newest sample wins over the condition's copy
    assert card["watermarks"]["cpu_evict"] == 80
    assert card["condition"]["state"] == "forbid"
    assert card["condition"]["forbid_cpu"]
    assert card["containers"] == 2
    assert card["cordoned"]
    bare = node_card({**row, "conditions": None}, [], None)
    assert bare["condition"]["state"] == "unknown"
    assert bare["watermarks"] == {}
    assert bare["usage"] == {}


def test_filter_and_pages() -> None:
    rows = [{"name": f"n{i}", "pod": "p", "state": "down" if i == 3 else "up"} for i in range(10)]
    assert [r["name"] for r in rows if matches(r, "down")] == ["n3"]
    assert [r["name"] for r in rows if matches(r, "N1 p")] == ["n1"]
    assert page(rows, 8, 4) == (rows[8:], 8)
    assert page(rows, 40, 4) == (rows[8:], 8)  # past the end: the last page


def test_eviction_summary_keeps_the_window_and_rates_not_the_input() -> None:
    body = {
        "decision_id": "d1",
        "node": "n1",
        "kind": "evict",
        "reason": "cpu-satisfaction",
        "victims": [{"container_id": "b1", "reason": "cpu-satisfaction", "release": 4.0, "priority": 1}],
        "numbers": {"newest": {"satisfaction_percent": 38.0}, "cpu": {"window_satisfaction_percent": 40.0}},
        "input": {
            "config": {"window_seconds": 100, "satisfaction_lower": 60, "cpu_evict": 75},
            "samples": [{"time": 10.0}, {"time": 30.0}, {"time": 20.0}],
        },
    }
    summary = eviction_summary(body)
    assert "input" not in summary
    assert summary["window"] == {"seconds": 100, "samples": 3, "first": 10.0, "last": 30.0}
    assert summary["thresholds"] == {"cpu_evict": 75, "satisfaction_lower": 60}
    assert summary["newest"]["satisfaction_percent"] == 38.0
    assert summary["victims"][0]["container_id"] == "b1"


def test_deploy_progress_and_service_rows() -> None:
    row = deploy_progress({"id": "d", "states": {"running": 2, "failed": 1, "creating": 1}})
    assert (row["placed"], row["running"], row["failed"], row["pending"]) == (4, 2, 1, 1)
    replicas = [{"service": "allocator", "replica": "a1", "ready": True}, {"service": "eviction", "replica": "e1"}]
    rows = {r["service"]: r for r in service_rows(replicas, ("allocator", "eviction", "distributor"), None)}
    assert rows["allocator"]["health"] == "ready"
    assert rows["eviction"]["health"] == "starting"  # a replica not ready yet
    assert rows["distributor"]["health"] == "missing"
    assert rows["allocator"]["restarts"] is None  # not reported by this stack: shown as such, not as 0
    lagging = [{"service": "allocator", "name": "allocator-deploy", "state": "degraded", "reasons": ["3 redelivered"]}]
    (slow,) = service_rows(replicas[:1], (), None, None, lagging)
    assert slow["health"] == "degraded"  # ready, but its consumer is not keeping up (as `eru status` says)
    assert slow["reasons"] == ["allocator-deploy: 3 redelivered"]
    counted = service_rows(replicas, ("allocator",), {"a1": 2, "eviction": 1}, {"allocator": "http://x/metrics"})
    assert counted[0]["restarts"] == 2  # by replica
    assert counted[1]["restarts"] == 1  # by service
    assert counted[0]["replicas"][0]["metrics_url"] == "http://x/metrics"


def _node(name: str, free: int) -> dict[str, Any]:
    return {
        "name": name,
        "cpu_map": {str(i): 100 for i in range(4)},
        "memory": 8 * GIB,
        "used": {"cpu_map": {str(i): 100 for i in range(4 - free)}},
    }


def test_a_decision_explains_every_node_not_chosen_with_numbers() -> None:
    problem = {
        "kind": "deploy",
        "mode": "auto",
        "count": 1,
        "request": {"cpu_bind": True, "cpu_request": 2, "memory_request": GIB},
        "nodes": [_node("full", 1), _node("idle", 4), _node("used", 2)],
    }
    output = {"deploy": {"used": 1}, "capacity": {"full": 0, "idle": 2, "used": 1}}
    explained = explain_deploy_decision(problem, output)
    [placed] = explained["placed"]
    assert {key: placed[key] for key in ("node", "instances", "capacity")} == {
        "node": "used",
        "instances": 1,
        "capacity": 1,
    }
    assert (placed["numbers"]["limited_by"], placed["numbers"]["cpu_bound"]) == ("cpu", 1)  # chosen nodes too
    why = {n["node"]: n for n in explained["not_chosen"]}
    assert (why["full"]["reason"], why["full"]["why"]) == ("too_small", "too small: needs 2 cores, 1 free")
    assert why["full"]["numbers"]["free_cpu"] == 1.0
    assert why["idle"]["reason"] == "room_unused"
    assert why["idle"]["why"] == "room for 2 instances; mode auto placed them elsewhere"
    assert [n["node"] for n in explained["not_chosen"]] == ["full", "idle"]  # no room first
    assert explained["not_chosen_counts"] == {"too_small": 1, "room_unused": 1}
    broken = explain_deploy_decision({"nodes": [{"name": "x", "cpu_map": "bad"}]}, {"capacity": {"x": 0}})
    assert broken["not_chosen"] == [
        {"node": "x", "capacity": 0, "reason": "too_small", "why": "too small: no room for one instance", "numbers": {}}
    ]
