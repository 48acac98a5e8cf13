"""docs/subjects.md is generated from the models and must be current."""

from __future__ import annotations

from pathlib import Path

from eru.bus.catalog import CATALOG, render_subject_reference
from eru.bus.streams import default_streams

ROOT = Path(__file__).resolve().parents[3]


def test_committed_subject_reference_is_current() -> None:
    committed = (ROOT / "docs" / "subjects.md").read_text()
    assert committed == render_subject_reference(), "regenerate: python -m eru.bus.catalog > docs/subjects.md"


def test_every_catalogued_stream_exists() -> None:
    streams = {spec.name for spec in default_streams()}
    for entry in CATALOG:
        if entry.stream.startswith("ERU_"):
            assert entry.stream in streams, entry.subject
