"""`eru.gc_tuning.collect_less`: what startup built is frozen, the young generation is collected less often, and
reference cycles made afterwards are still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from eru.gc_tuning import THRESHOLDS, collect_less


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
    assert source.index("collect_less()") < source.index("asyncio.run(")
