"""The collector settings every service starts with (eru.gc_tuning, docs/performance.md "Garbage collection pauses")."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from eru import gc_tuning
from eru.settings import load_settings


@pytest.fixture
def restored() -> Iterator[None]:
    before = gc.get_threshold()
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


@pytest.mark.usefixtures("restored")
def test_the_young_threshold_is_raised_and_zero_keeps_cpythons() -> None:
    gc.set_threshold(700, 10, 10)
    assert gc_tuning.tune(0) == (700, 10, 10)
    assert gc_tuning.tune(50_000) == (50_000, 10, 10)
    assert load_settings().gc_threshold == gc_tuning.DEFAULT_THRESHOLD == 50_000


@pytest.mark.usefixtures("restored")
def test_what_lives_at_start_is_frozen_out_of_full_collections() -> None:
    gc.unfreeze()
    kept = [[index] for index in range(10_000)]  # tracked objects alive "at start"
    frozen = gc_tuning.freeze_started()
    assert frozen >= len(kept)
    assert gc.get_freeze_count() == frozen
    oldest = {id(item) for item in gc.get_objects(generation=2)}
    assert id(kept) not in oldest  # a full collection no longer traverses it
    gc.collect()
    assert id(kept) not in {id(item) for item in gc.get_objects(generation=2)}


def test_a_bad_threshold_names_the_field() -> None:
    from eru.errors import InvalidInput

    with pytest.raises(InvalidInput, match="gc_threshold"):
        load_settings(gc_threshold=-1)
