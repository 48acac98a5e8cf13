"""`all_pages` (what every `eru … ls` uses) with scripted pages: rows in order, a deploy's containers merged,
`max_rows` stops early, and a listing of more than two pages shows a progress line on stderr (docs/bus.md, paging)."""

from __future__ import annotations

import asyncio
import io
from typing import Any

import pytest
from rich.console import Console

from eru.cli import bus_client
from eru.domain.messages import OperationReply, QueryRequest


def _script(pages: list[list[dict[str, Any]]], asked: list[str | None]) -> Any:
    async def operation(_nc: Any, name: str, request: Any, _timeout: float) -> OperationReply:
        asked.append(request.cursor)
        index = 0 if request.cursor is None else int(request.cursor)
        more = str(index + 1) if index + 1 < len(pages) else None
        return OperationReply(message=f"{name} page", rows=pages[index], next_cursor=more)

    return operation


def test_rows_of_every_page_in_order_and_max_rows_stops_early(monkeypatch: pytest.MonkeyPatch) -> None:
    pages = [[{"id": f"{p}-{i}"} for i in range(3)] for p in range(4)]
    asked: list[str | None] = []
    monkeypatch.setattr(bus_client, "operation", _script(pages, asked))
    reply = asyncio.run(bus_client.all_pages(None, "query", QueryRequest(what="deploys"), 1.0, progress=False))
    assert [row["id"] for row in reply.rows] == [row["id"] for page in pages for row in page]
    assert (asked, reply.next_cursor, reply.message) == ([None, "1", "2", "3"], None, "query page")

    asked.clear()
    some = asyncio.run(bus_client.all_pages(None, "query", QueryRequest(what="deploys"), 1.0, max_rows=4))
    assert [row["id"] for row in some.rows] == ["0-0", "0-1", "0-2", "1-0"]
    assert asked == [None, "1"]  # the third and fourth pages are never asked for


def test_a_deploys_containers_are_merged_into_its_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    pages = [[{"deploy": {"id": "d"}, "containers": [{"id": f"c{p}{i}"} for i in range(2)]}] for p in range(3)]
    monkeypatch.setattr(bus_client, "operation", _script(pages, []))
    reply = asyncio.run(bus_client.all_pages(None, "query", QueryRequest(what="deploy", deploy_id="d"), 1.0))
    assert len(reply.rows) == 1
    assert [c["id"] for c in reply.rows[0]["containers"]] == ["c00", "c01", "c10", "c11", "c20", "c21"]


def test_a_long_listing_shows_progress_on_stderr_and_a_short_one_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = io.StringIO()
    fake_stderr = Console(file=terminal, force_terminal=True, width=100)
    monkeypatch.setattr(bus_client.err_console, "_console", fake_stderr)
    monkeypatch.setattr(bus_client, "operation", _script([[{"id": "a"}], [{"id": "b"}]], []))
    asyncio.run(bus_client.all_pages(None, "tenant-ls", QueryRequest(what="nodes"), 1.0))
    assert "reading" not in terminal.getvalue()

    pages = [[{"id": f"{p}"}] * 500 for p in range(5)]
    monkeypatch.setattr(bus_client, "operation", _script(pages, []))
    reply = asyncio.run(bus_client.all_pages(None, "tenant-ls", QueryRequest(what="nodes"), 1.0))
    assert len(reply.rows) == 2_500
    shown = terminal.getvalue()
    assert "reading tenant-ls: 2,000 rows, page 5" in shown  # the last state before the last page arrived
    assert shown.endswith("\x1b[2K")  # transient: erased once every page is in
