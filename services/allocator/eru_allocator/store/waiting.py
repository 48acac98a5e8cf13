"""Admission waits' rows (docs/fairness-and-scoring.md "Waiting for admission"): a submitted wait notifies this
channel at commit, and the admission pass listens on it (`eru_allocator.admission.waiting`)."""

from __future__ import annotations

CHANNEL = "eru_admission"
"""The `NOTIFY` channel of new admission waits (the payload names the pod)."""
