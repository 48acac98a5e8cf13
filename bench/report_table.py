"""The headline report's figures as a Markdown table (`python -m bench report`, bench/README.md).

Pure: a report (the JSON `bench.report` prints) in, Markdown text out; no I/O, no clock.
"""

from __future__ import annotations

from typing import Any

COLUMNS = ("figure", "result", "goal", "command")


def _cell(value: Any) -> str:
    """One table cell: text on one line, pipes escaped."""
    text = "" if value is None else str(value)
    return " ".join(text.split()).replace("|", "\\|")


def machine_line(machine: dict[str, Any]) -> str:
    """`AMD EPYC, 2 cores, Python 3.11.2, load 0.4 at the start` from the report's `machine`."""
    parts = [str(machine.get("cpu") or "unknown CPU")]
    if machine.get("cores") is not None:
        parts.append(f"{machine['cores']} cores")
    if machine.get("python"):
        parts.append(f"Python {machine['python']}")
    if machine.get("load_at_start") is not None:
        parts.append(f"load {machine['load_at_start']} at the start")
    return ", ".join(parts)


def render_table(report: dict[str, Any]) -> str:
    """The report as Markdown: a line naming the machine and the mode, then one row per figure (a skipped or failed
    step is a row too, saying so in its result). Commands are shown as code."""
    command = "python -m bench report --quick" if report.get("quick") else "python -m bench report"
    lines = [
        f"Machine: {machine_line(report.get('machine') or {})}; `{command}`.",
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
    ]
    for figure in report.get("figures") or []:
        command = _cell(figure.get("command"))
        cells = [
            _cell(figure.get("figure")),
            _cell(figure.get("result")),
            _cell(figure.get("goal")) or "—",
            f"`{command}`" if command else "—",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
