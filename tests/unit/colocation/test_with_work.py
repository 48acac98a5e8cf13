"""`with_work` builds each batch container's info with its work done: the same as `dataclasses.replace`."""

from __future__ import annotations

import dataclasses

from eru.colocation.policy import ContainerInfo
from eru.colocation.progress import with_work


def test_with_work_keeps_every_other_field() -> None:
    values = {
        field.name: (f"x-{field.name}" if field.type == "str" else 7 if field.type == "int" else 1.5)
        for field in dataclasses.fields(ContainerInfo)
    }
    info = ContainerInfo(**values)
    untouched = ContainerInfo(**{**values, "id": "other"})
    got = with_work({"a": info, "b": untouched}, {"a": 12.34567})
    assert got["a"] == dataclasses.replace(info, work=12.346)
    assert got["b"] is untouched  # no work recorded: the info itself


def test_unchanged_work_keeps_the_same_info() -> None:
    info = ContainerInfo("a", "batch", 1, 1_000_000, 1 << 30, work=2.5)
    assert with_work({"a": info}, {"a": 2.5})["a"] is info
