"""CPU-prime arithmetic on one set of cores (docs/planning.md): how many plans fit, and which plans, without enumerating
them.

A request of W whole cores plus a fragment of f pieces. Each core plays one role: a whole source (free pieces a
positive multiple of share_base B: u = free/B units, at most one per plan) or a fragment source (⌊free/f⌋ fragments).
Cores whose free pieces are not a multiple of B are fragment sources already; the planner may turn whole sources into
fragment sources ("conversions"), at most `budget` of them (max_fragment_cores).

For a fixed set of whole sources, n plans fit iff Σ min(u_c, n) ≥ n·W (n groups of W distinct cores, each core in at
most u_c groups — the round-robin argument), and the fragments iff Σ ⌊free/f⌋ ≥ n. Capacity therefore needs only the
number of cores per free-pieces value (`Group`), never core ids. Whole sources with the same number of units are
interchangeable, so a conversion choice is a vector of counts per class of identical cores: with one class (the usual
case) the best count has a closed form found by bisection (whole supply falls, fragment supply rises with each
conversion); with more, the largest class is bisected and the others, usually one, are enumerated. Past
`ENUMERATION_LIMIT` combinations the planner falls back to Eru's own split heuristic (convert the most-loaded whole
cores one at a time) plus the same walk in the other order, so it is never below Eru's figure.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

ENUMERATION_LIMIT = 256
_free = operator.itemgetter(1)
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


Group = tuple[int, int, int]  # (free pieces, fixed fragment sources, whole-source candidates) with that many free


@dataclass(frozen=True, slots=True)
class CoreSolution:
    """How many plans fit and which cores serve them: `taken` maps a free-pieces value to how many of the whole-source
    candidates with that many free pieces become fragment sources (the first ones in preference order)."""

    plans: int
    taken: Mapping[int, int]
    fixed_fragments: frozenset[str] = frozenset()

    def sources(self, ordered: Sequence[Core], share_base: int) -> tuple[list[Core], list[Core], bool]:
        """(whole sources, fragment sources) as (id, free pieces), both in preference order, from the cores the
        solution was computed on (in preference order); and whether every whole source has exactly one unit.

        Fragment sources list the cores that already serve fragments (free pieces not a multiple of share_base, or
        fixed) first, then the whole cores this solution converts, each part fewest free pieces first."""
        whole_sources: list[Core] = []
        fragment_sources: list[Core] = []
        converted_sources: list[Core] = []
        single = True
        fixed_fragments = self.fixed_fragments
        taken = self.taken
        for free, members in itertools.groupby(ordered, key=_free):
            if free % share_base:
                fragment_sources.extend(members)
                continue
            group = list(members)
            if fixed_fragments:
                fragment_sources.extend(core for core in group if core[0] in fixed_fragments)
                group = [core for core in group if core[0] not in fixed_fragments]
            converted = taken.get(free, 0)
            if converted:
                converted_sources.extend(group[:converted])
                group = group[converted:]
            if group:
                whole_sources.extend(group)
                if free != share_base:
                    single = False
        # Cores that already serve fragments come before whole cores split now, whatever their free pieces, so idle
        # cores stay whole as long as an existing fragment source can serve (docs/planning.md, fragment order).
        fragment_sources.extend(converted_sources)
        return whole_sources, fragment_sources, single


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


def order_cores(cores: Sequence[Core], key: Callable[[str], tuple[int, str]]) -> list[Core]:
    """Cores with free pieces, in preference order: fewest free pieces first, then by id."""
    return sorted((core for core in cores if core[1] > 0), key=lambda core: (core[1], key(core[0])))


def groups_of(ordered: Sequence[Core], share_base: int, fixed_fragments: frozenset[str] = frozenset()) -> list[Group]:
    """Cores in preference order → groups by free pieces, ascending."""
    counts: dict[int, list[int]] = {}
    for core, free in ordered:
        entry = counts.get(free)
        if entry is None:
            entry = counts[free] = [0, 0]
        if free % share_base or core in fixed_fragments:
            entry[0] += 1
        else:
            entry[1] += 1
    return [(free, fixed, candidates) for free, (fixed, candidates) in sorted(counts.items())]


def groups_of_free(free_counts: Mapping[int, int], share_base: int) -> list[Group]:
    """{free pieces: number of cores} (no fixed fragment sources beyond the cores' own) → groups, ascending."""
    return [
        (free, count, 0) if free % share_base else (free, 0, count)
        for free, count in sorted(free_counts.items())
        if free > 0
    ]


def solve(
    ordered: Sequence[Core], fixed_fragments: frozenset[str], budget: int | None, shape: Shape, limit: int
) -> CoreSolution:
    """`solve_groups` over cores given in preference order (`order_cores`), some forced to be fragment sources."""
    groups = groups_of(ordered, shape.share_base, fixed_fragments)
    plans, taken = solve_groups(groups, budget, shape, limit)
    return CoreSolution(plans, taken, fixed_fragments)


def solve_groups(groups: Sequence[Group], budget: int | None, shape: Shape, limit: int) -> tuple[int, dict[int, int]]:
    """The most plans (at most `limit`) the cores can host, with the fewest conversions that reach it:
    (plans, {free pieces: conversions}). `budget` is how many more cores may become fragment sources (None =
    unlimited)."""
    if limit <= 0 or not groups:
        return 0, {}
    base, whole, fragment = shape.share_base, shape.whole, shape.fragment
    if fragment == 0:
        units = [(free // base, candidates) for free, _, candidates in groups if candidates]
        return min(limit, whole_plans(units, whole)), {}
    supply = 0
    for free, fixed, _ in groups:
        if fixed:
            supply += free // fragment * fixed
    if whole == 0:
        return _fragments_only(groups, supply, budget, fragment, limit)
    class_groups = [(free, candidates) for free, _, candidates in groups if candidates]
    class_units = [free // base for free, _ in class_groups]
    counts = [candidates for _, candidates in class_groups]
    gains = [unit * base // fragment for unit in class_units]
    plans, vector = _best_conversions(class_units, counts, gains, supply, budget, whole, limit)
    return plans, {free: taken for (free, _), taken in zip(class_groups, vector, strict=True) if taken}


def _fragments_only(
    groups: Sequence[Group], supply: int, budget: int | None, fragment: int, limit: int
) -> tuple[int, dict[int, int]]:
    """Requests below one core: every plan is one fragment. Convert the most-loaded cores first, as few as needed;
    under a cap, only among the cores giving the most fragments."""
    candidate_count = sum(candidates for _, _, candidates in groups)
    left = candidate_count if budget is None else min(budget, candidate_count)
    pool: dict[int, int] = {}  # free → how many of the group's candidates may convert
    for free, _, candidates in reversed(groups):
        if left <= 0:
            break
        if candidates:
            pool[free] = min(left, candidates)
            left -= pool[free]
    best = min(limit, supply + sum(free // fragment * usable for free, usable in pool.items()))
    taken: dict[int, int] = {}
    for free, _, _ in groups:
        usable = pool.get(free, 0)
        if usable and supply < best:
            per_core = free // fragment
            taken[free] = min(usable, -(-(best - supply) // per_core))
            supply += taken[free] * per_core
    return best, taken


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
    budget_total = sum(counts) if budget is None else budget
    if size == 1:
        return _single_class(units[0], counts[0], gains[0], supply, budget_total, whole, limit)
    largest = max(range(size), key=lambda index: (counts[index], -index))
    others = [index for index in range(size) if index != largest]
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


def _single_class(
    unit: int, count: int, gain: int, supply: int, budget: int, whole: int, limit: int
) -> tuple[int, list[int]]:
    """The usual case, all whole sources alike: with t of the `count` cores converted, r = count − t cores of `unit`
    units host ⌊r·unit/W⌋ whole parts when r ≥ W (else none), and the fragments number supply + t·gain."""
    top = min(count, budget)

    def whole_after(taken: int) -> int:
        rest = count - taken
        return min(limit, rest * unit // whole) if rest >= whole else 0

    low, high = 0, top + 1
    while low < high:
        middle = (low + high) // 2
        if supply + gain * middle >= whole_after(middle):
            high = middle
        else:
            low = middle + 1
    value = whole_after(low) if low <= top else 0
    if low > 0:
        value = max(value, min(supply + gain * (low - 1), whole_after(low - 1)))
    taken = -(-(value - supply) // gain) if value > supply else 0
    return value, [taken]


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


def build_plans(solution: CoreSolution, ordered: Sequence[Core], shape: Shape, count: int) -> list[dict[str, int]]:
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
    whole_sources, fragment_sources, single = solution.sources(ordered, base)
    if whole == 1 and single:
        maps = [{core: base} for core, _ in whole_sources[:count]]
    else:
        maps = [{} for _ in range(count)]
        if whole and single:
            for index in range(count):
                plan = maps[index]
                for core, _ in whole_sources[index * whole : (index + 1) * whole]:
                    plan[core] = base
        elif whole:
            _build_whole(whole_sources, whole, base, total, maps)
    if fragment:
        index = 0
        for core, pieces in fragment_sources:
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
    units = [free // base for _, free in sources]
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
