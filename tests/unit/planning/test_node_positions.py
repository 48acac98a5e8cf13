"""Finding a few nodes of a large pod by bisection (docs/planning.md "Per-batch cost"): the same answers as the pass
over every node it replaces, whether the nodes are sorted by name (a snapshot's) or not (an `eru plan` problem)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from eru.planning import NodeResources, PlanningConfig, normalize_request
from eru.planning.capacity import analyse_nodes, materialize_analysed
from eru.planning.decide import _live_counts
from eru.planning.resources import node_positions

CONFIG = PlanningConfig()
NAMES = st.lists(st.text(alphabet="ab-09", min_size=1, max_size=4), min_size=1, max_size=40, unique=True)


def node(name: str, cores: int = 4) -> NodeResources:
    return NodeResources(name, {str(core): 100 for core in range(cores)}, 8 << 30)


@settings(max_examples=200, deadline=None)
@given(NAMES, st.data())
def test_positions_are_those_of_the_names_or_none(names: list[str], data: st.DataObject) -> None:
    order = data.draw(st.sampled_from(["sorted", "shuffled"]))
    names = sorted(names) if order == "sorted" else data.draw(st.permutations(names))
    nodes = [node(name) for name in names]
    wanted = data.draw(st.lists(st.sampled_from(names), unique=True))
    absent = data.draw(st.lists(st.text(alphabet="ab-09xyz", min_size=1, max_size=4), max_size=2))
    absent = [name for name in absent if name not in names]
    found = node_positions(nodes, wanted + absent)
    if found is not None:
        assert not absent
        assert found == sorted(names.index(name) for name in wanted)
    elif order == "sorted":
        assert absent  # sorted nodes: every present name is found


@settings(max_examples=150, deadline=None)
@given(NAMES, st.data())
def test_plans_and_live_counts_are_those_of_the_full_pass(names: list[str], data: st.DataObject) -> None:
    names = sorted(names) if data.draw(st.booleans()) else data.draw(st.permutations(names))
    nodes = tuple(node(name, data.draw(st.integers(1, 4))) for name in names)
    request = normalize_request({"cpu_bind": True, "cpu_request": 1, "memory_request": "1GiB"}, CONFIG)
    analyses = analyse_nodes(nodes, request, CONFIG)
    placements = {
        n.name: data.draw(st.integers(0, a.capacity)) for n, a in zip(nodes, analyses, strict=True) if a.capacity
    }
    placements = dict(data.draw(st.permutations(list(placements.items()))))
    full = [
        plan
        for n, a in zip(nodes, analyses, strict=True)
        if placements.get(n.name)
        for plan in materialize_analysed([n], [a], request, {n.name: placements[n.name]})
    ]
    assert materialize_analysed(nodes, analyses, request, placements) == full
    live = {name: data.draw(st.integers(0, 3)) for name in data.draw(st.lists(st.sampled_from(names), unique=True))}
    live |= {"not-in-the-pod": 2} if data.draw(st.booleans()) else {}
    expected = {n.name: live[n.name] for n in nodes if live.get(n.name)}
    got = _live_counts(nodes, live)
    assert got == expected
    assert list(got) == list(expected)
