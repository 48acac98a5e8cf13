"""CPU-prime arithmetic on one set of cores (SPEC §2.1): how many plans fit, and which plans, without enumerating them.

A request of W whole cores plus a fragment of f pieces. Each core plays one role: a whole source (free pieces a
positive multiple of share_base B: u = free/B units, at most one per plan) or a fragment source (⌊free/f⌋ fragments).
Cores whose free pieces are not a multiple of B are fragment sources already; the planner may turn whole sources into
fragment sources ("conversions"), at most `budget` of them (max_fragment_cores).

For a fixed set of whole sources, n plans fit iff Σ min(u_c, n) ≥ n·W (n groups of W distinct cores, each core in at
most u_c groups — the round-robin argument), and the fragments iff Σ ⌊free/f⌋ ≥ n. Whole sources with the same number
of units are interchangeable, so a conversion choice is a vector of counts per class of identical cores: the largest
class is optimised by bisection (whole supply falls, fragment supply rises with each conversion) and the other
classes, usually none or one, are enumerated. Past `ENUMERATION_LIMIT` combinations the planner falls back to Eru's own
split heuristic (convert the most-loaded whole cores one at a time) plus the same walk in the other order, so it is
never below Eru's figure.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

ENUMERATION_LIMIT = 256
Core = tuple[str, int]  # (core id, free pieces)


@dataclass(frozen=True, slots=True)
class Shape:
    """A CPU-prime request split into `whole` cores and a `fragment` of pieces, at `share_base` pieces per core."""

    whole: int
    fragment: int
    share_base: int

    @classmethod
    def of(cls, pieces: int, share_base: int) -> Shape:
        """The shape of a request of `pieces` pieces."""
        return cls(pieces // share_base, pieces % share_base, share_base)


@dataclass(frozen=True, slots=True)
class CoreSolution:
    """How many plans fit, the whole sources (id, units) and fragment sources (id, free pieces) in preference order."""

    plans: int
    whole_sources: tuple[Core, ...]
    fragment_sources: tuple[Core, ...]
    converted: tuple[str, ...]


def whole_plans(units: Sequence[tuple[int, int]], per_plan: int) -> int:
    """Largest n with Σ count·min(units, n) ≥ n·per_plan, over classes (units, count)."""
    total = 0
    all_single = True
    for unit, count in units:
        total += unit * count
        if unit != 1:
            all_single = False
    if per_plan <= 0 or total == 0:
        return 0
    if all_single:
        return total // per_plan
    low, high = 0, total // per_plan
    while low < high:
        middle = (low + high + 1) // 2
        if sum(count * min(unit, middle) for unit, count in units) >= middle * per_plan:
            low = middle
        else:
            high = middle - 1
    return low


def solve(
    cores: Sequence[Core],
    fixed_fragments: frozenset[str],
    budget: int | None,
    shape: Shape,
    limit: int,
    key: Callable[[str], tuple[int, str]],
) -> CoreSolution:
    """The most plans (at most `limit`) the cores can host, with the fewest conversions that reach it.

    `cores` are (id, free pieces) with free > 0; `fixed_fragments` are cores that must act as fragment sources (beyond
    those whose free pieces are not a multiple of share_base); `budget` is how many more cores may become fragment
    sources (None = unlimited); `key` orders core ids.
    """
    base, whole, fragment = shape.share_base, shape.whole, shape.fragment
    ordered = sorted(cores, key=lambda core: (core[1], key(core[0])))
    fixed: list[Core] = []
    candidates: list[Core] = []
    for core in ordered:
        if core[1] % base or core[0] in fixed_fragments:
            fixed.append(core)
        else:
            candidates.append(core)
    if limit <= 0:
        return CoreSolution(0, (), (), ())
    if fragment == 0:
        units = [(pieces // base, 1) for _, pieces in candidates]
        plans = min(limit, whole_plans(units, whole))
        return CoreSolution(plans, tuple((core, pieces // base) for core, pieces in candidates), (), ())
    supply = sum(pieces // fragment for _, pieces in fixed)
    if whole == 0:
        return _fragments_only(candidates, fixed, supply, budget, fragment, limit, key)
    classes: dict[int, list[str]] = {}
    for core_id, pieces in candidates:
        classes.setdefault(pieces // base, []).append(core_id)
    class_units = sorted(classes)
    counts = [len(classes[unit]) for unit in class_units]
    gains = [unit * base // fragment for unit in class_units]
    conversions = _best_conversions(class_units, counts, gains, supply, budget, whole, limit)
    plans = conversions[0]
    converted: list[str] = []
    whole_sources: list[Core] = []
    for unit, taken in zip(class_units, conversions[1], strict=True):
        converted.extend(classes[unit][:taken])
        whole_sources.extend((core, unit) for core in classes[unit][taken:])
    converted_set = set(converted)
    fragment_sources = [core for core in ordered if core[0] in converted_set or core in fixed]
    whole_sources.sort(key=lambda item: (item[1], key(item[0])))
    return CoreSolution(plans, tuple(whole_sources), tuple(fragment_sources), tuple(converted))


def _fragments_only(
    candidates: list[Core],
    fixed: list[Core],
    supply: int,
    budget: int | None,
    fragment: int,
    limit: int,
    key: Callable[[str], tuple[int, str]],
) -> CoreSolution:
    """Requests below one core: every plan is one fragment. Convert the most-loaded cores first, as few as needed;
    under a cap, the cores giving the most fragments."""
    allowed = len(candidates) if budget is None else min(budget, len(candidates))
    pool = candidates if allowed == len(candidates) else sorted(candidates, key=lambda core: -core[1])[:allowed]
    best = min(limit, supply + sum(pieces // fragment for _, pieces in pool))
    converted: list[Core] = []
    if supply < best:
        pool_in_order = sorted(pool, key=lambda core: (core[1], key(core[0])))
        for core in pool_in_order:
            converted.append(core)
            supply += core[1] // fragment
            if supply >= best:
                break
    sources = sorted(fixed + converted, key=lambda core: (core[1], key(core[0])))
    return CoreSolution(best, (), tuple(sources), tuple(core for core, _ in converted))


def _best_conversions(
    units: list[int],
    counts: list[int],
    gains: list[int],
    supply: int,
    budget: int | None,
    whole: int,
    limit: int,
) -> tuple[int, list[int]]:
    """(most plans, conversions per class) — fewest conversions among the best, then the most-loaded classes."""
    size = len(units)
    if size == 0:
        return min(limit, 0), []
    largest = max(range(size), key=lambda index: (counts[index], -index))
    others = [index for index in range(size) if index != largest]
    budget_total = sum(counts) if budget is None else budget
    ranges = [range(min(counts[index], budget_total) + 1) for index in others]
    combinations = 1
    for choices in ranges:
        combinations *= len(choices)
    best: tuple[int, int, list[int]] = (-1, 0, [])
    if combinations <= ENUMERATION_LIMIT:
        for chosen in itertools.product(*ranges):
            spent = sum(chosen)
            if spent > budget_total:
                continue
            vector = [0] * size
            for index, taken in zip(others, chosen, strict=True):
                vector[index] = taken
            best = _better(
                best, _optimise_one(vector, largest, units, counts, gains, supply, budget_total, whole, limit)
            )
        return best[0], best[2]
    # Too many classes to enumerate: Eru's walk (most-loaded whole cores first) and the reverse walk.
    order = [index for index in range(size) for _ in range(counts[index])]
    for walk in (order, order[::-1]):
        vector = [0] * size
        for step in range(min(len(walk), budget_total) + 1):
            if step:
                vector[walk[step - 1]] += 1
            best = _better(best, (_plans(vector, units, counts, gains, supply, whole, limit), step, list(vector)))
    return best[0], best[2]


def _better(best: tuple[int, int, list[int]], other: tuple[int, int, list[int]]) -> tuple[int, int, list[int]]:
    if other[0] > best[0] or (other[0] == best[0] and other[1] < best[1]):
        return other
    return best


def _plans(
    vector: list[int], units: list[int], counts: list[int], gains: list[int], supply: int, whole: int, limit: int
) -> int:
    remaining = [(unit, count - taken) for unit, count, taken in zip(units, counts, vector, strict=True)]
    fragments = supply + sum(gain * taken for gain, taken in zip(gains, vector, strict=True))
    return min(limit, fragments, whole_plans(remaining, whole))


def _optimise_one(
    vector: list[int],
    index: int,
    units: list[int],
    counts: list[int],
    gains: list[int],
    supply: int,
    budget: int,
    whole: int,
    limit: int,
) -> tuple[int, int, list[int]]:
    """Best number of conversions in class `index`, the others fixed by `vector`: (plans, conversions, vector)."""
    spent = sum(vector)
    top = min(counts[index], budget - spent)
    base_supply = supply + sum(gain * taken for gain, taken in zip(gains, vector, strict=True))
    gain = gains[index]
    fixed_remaining = [
        (unit, count - taken)
        for position, (unit, count, taken) in enumerate(zip(units, counts, vector, strict=True))
        if position != index
    ]

    def whole_after(taken: int) -> int:
        return min(limit, whole_plans([*fixed_remaining, (units[index], counts[index] - taken)], whole))

    # Smallest t in [0, top] where the fragment supply reaches the (falling) whole supply.
    low, high = 0, top + 1
    while low < high:
        middle = (low + high) // 2
        if base_supply + gain * middle >= whole_after(middle):
            high = middle
        else:
            low = middle + 1
    candidates = []
    if low <= top:
        candidates.append(whole_after(low))
    if low > 0:
        candidates.append(min(base_supply + gain * (low - 1), whole_after(low - 1)))
    value = max(candidates)
    taken = max(0, -(-(value - base_supply) // gain)) if value > base_supply else 0
    result = list(vector)
    result[index] = taken
    return value, spent + taken, result


def build_plans(solution: CoreSolution, shape: Shape, count: int) -> list[dict[str, int]]:
    """The first `count` (≤ solution.plans) concrete cpu maps, in allocation order.

    Fragments come from the fragment sources in preference order (the most-loaded first, so they pack). Whole cores
    are picked in preference order too, except that a plan must take cores that every remaining plan needs: with r
    plans still to build (this one included), a core with u ≥ r units can serve all of them, while each core with
    u < r taken now lowers Σ min(u, r−1); that sum must stay ≥ (r−1)·W, which bounds how many such cores this plan may
    take. When every whole source has one unit, that reduces to slicing.
    """
    total = solution.plans
    count = min(count, total)
    if count <= 0:
        return []
    base, whole, fragment = shape.share_base, shape.whole, shape.fragment
    maps: list[dict[str, int]] = [{} for _ in range(count)]
    if whole:
        sources = solution.whole_sources
        if all(units == 1 for _, units in sources):
            for index in range(count):
                plan = maps[index]
                for core, _ in sources[index * whole : (index + 1) * whole]:
                    plan[core] = base
        else:
            _build_whole(sources, whole, base, total, maps)
    if fragment:
        index = 0
        for core, pieces in solution.fragment_sources:
            for _ in range(pieces // fragment):
                if index >= count:
                    break
                maps[index][core] = fragment
                index += 1
            if index >= count:
                break
    return maps


def _build_whole(
    sources: Sequence[tuple[str, int]], whole: int, base: int, total: int, maps: list[dict[str, int]]
) -> None:
    cores = [core for core, _ in sources]
    units = [unit for _, unit in sources]
    for index, plan in enumerate(maps):
        remaining = total - index
        later = remaining - 1
        slack = -later * whole
        for unit in units:
            slack += min(unit, later)
        # Cores with u < remaining taken now each cost one from Σ min(u, later); `slack` is how many may be taken.
        for position, unit in enumerate(units):
            if len(plan) == whole:
                break
            if unit == 0:
                continue
            if unit < remaining:
                if slack <= 0:
                    continue
                slack -= 1
            plan[cores[position]] = base
            units[position] = unit - 1
