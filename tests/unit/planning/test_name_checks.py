"""The node names checked once (`eru.planning.modes.arrays`: a tuple already found well-formed and unique is not
checked again; `eru.planning.distribute.decide_many`: a batch's shared names once for all its asks) against every
ask checked on its own, over seeded random batches: the same placements, the same refusals naming the same field."""

from __future__ import annotations

import random
from typing import Any

import pytest

from eru.domain import PlaceBatchRequest, PlaceRequest
from eru.errors import EruError, InvalidInput
from eru.planning.distribute import SlotColumns, decide, decide_many, error_dict, place_columns


def _alone(ask: dict[str, Any], names: list[str], index: int) -> dict[str, Any]:
    """What the batch must answer for ask `index`: the ask decided alone, its names (a fresh list) inline."""
    columns = {"names": list(names), **ask["columns"]} if "names" not in ask["columns"] else ask["columns"]
    try:
        return {"placements": decide(PlaceRequest.model_validate({**ask, "columns": columns})).placements}
    except EruError as error:
        prefix = f"asks[{index}]."
        answer = error_dict(error)
        if "field" in answer["details"]:
            answer["details"]["field"] = prefix + answer["details"]["field"]
            answer["message"] = prefix + answer["message"]
        return {"error": answer}


@pytest.mark.parametrize("seed", range(12))
def test_a_batch_answers_each_ask_as_alone(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.randint(1, 30)
    names = [f"n{i:02d}" for i in range(size)]
    if rng.random() < 0.3 and size > 1:  # the batch's names repeat one
        names[rng.randrange(1, size)] = names[0]
    asks = []
    for _ in range(rng.randint(1, 6)):
        mode = rng.choice(["auto", "fill", "each"])
        columns: dict[str, Any] = {"capacity": [rng.randint(0, 4) for _ in names]}
        if mode != "each":
            columns["count"] = [rng.randint(0, 3) for _ in names]
        if rng.random() < 0.2:  # an ask with its own names (a repeated one, sometimes)
            own = [f"m{i}" for i in range(size)]
            if rng.random() < 0.5 and size > 1:
                own[-1] = own[0]
            columns["names"] = own
        asks.append({"mode": mode, "count": rng.randint(1, 5), "columns": columns})
    batch = PlaceBatchRequest.model_validate({"names": names, "asks": asks})
    for _ in range(2):  # and again: the names the first pass found good are not checked again
        results = decide_many(batch).results
        for index, (ask, result) in enumerate(zip(asks, results, strict=True)):
            expected = _alone(ask, names, index)
            assert result.model_dump(exclude_none=True) == expected


def test_a_tuple_found_good_is_not_a_pass_for_another() -> None:
    good, repeated = ("a", "b", "c"), ("a", "b", "a")
    assert place_columns("auto", SlotColumns(good, [1, 1, 1], [0, 0, 0]), 2, 0, {}) == {"a": 1, "b": 1}
    for _ in range(2):
        with pytest.raises(InvalidInput) as caught:
            place_columns("auto", SlotColumns(repeated, [1, 1, 1], [0, 0, 0]), 2, 0, {})
        assert caught.value.details["field"] == "nodes[2].name"
    assert place_columns("auto", SlotColumns(good, [1, 1, 1], [0, 0, 0]), 3, 0, {}) == {"a": 1, "b": 1, "c": 1}
    with pytest.raises(InvalidInput) as caught:
        place_columns("auto", SlotColumns(("a", ""), [1, 1], [0, 0]), 2, 0, {})
    assert caught.value.details["field"] == "nodes[1].name"
