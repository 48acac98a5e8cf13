"""Real nats-server per test and a real PostgreSQL per session (fresh database per test); `scripted_pipeline` starts
the allocator pipeline with a scripted node agent (pipeline_harness.pipeline_with_scripted_agent) and closes it after
the test, so a test file's `pipeline` fixture is one call naming its nodes and options."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import pytest_asyncio
from pipeline_harness import Pipeline, ScriptedNodeAgent, ScriptedPipeline, pipeline_with_scripted_agent

from eru.testing.pytest_nats import js, nats_server, nats_url, nc
from eru.testing.pytest_postgres import postgres_dsn, postgres_server, postgres_template, store_pool

__all__ = [
    "js",
    "nats_server",
    "nats_url",
    "nc",
    "postgres_dsn",
    "postgres_server",
    "postgres_template",
    "scripted_pipeline",
    "store_pool",
]


@pytest_asyncio.fixture
async def scripted_pipeline(nats_url: str, postgres_dsn: str) -> AsyncIterator[ScriptedPipeline]:
    """`await scripted_pipeline(nodes, start={...}, **agent)` → (pipeline, agent), both stopped after the test."""
    async with contextlib.AsyncExitStack() as stack:

        async def started(
            nodes: Sequence[str] | Mapping[str, Mapping[str, Any]] = ("n1",),
            *,
            start: Mapping[str, Any] | None = None,
            **agent: Any,
        ) -> tuple[Pipeline, ScriptedNodeAgent]:
            made = pipeline_with_scripted_agent(nats_url, postgres_dsn, nodes, start=start, **agent)
            return await stack.enter_async_context(made)

        yield started
