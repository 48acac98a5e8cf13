"""`eru.gc_tuning.collect_less`: what startup built is frozen, the young generation is collected less often, and
reference cycles made afterwards are still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from eru import gc_tuning
from eru.gc_tuning import THRESHOLDS, collect_less
from eru.settings import load_settings


@pytest.fixture
def restored() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


class _Node:
    def __init__(self) -> None:
        self.me = self


@pytest.mark.usefixtures("restored")
def test_startup_is_frozen_and_cycles_are_still_collected() -> None:
    kept = _Node()
    collect_less()
    assert gc.get_threshold() == THRESHOLDS
    assert gc.get_freeze_count() > 0
    assert gc.is_tracked(kept)
    cycle = _Node()
    gone = weakref.ref(cycle)
    del cycle
    assert gone() is not None  # a cycle: reference counting alone never frees it
    gc.collect()
    assert gone() is None


def test_every_service_collects_less_before_it_serves() -> None:
    import inspect

    from eru import service

    source = inspect.getsource(service.run)
    assert source.index("collect_less()") < source.index("loop_runner(")


@pytest.mark.usefixtures("restored")
def test_the_young_threshold_is_raised_and_zero_leaves_it() -> None:
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
