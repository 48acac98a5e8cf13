"""The rich consoles of the CLI: a terminal's width on a terminal; never wrapped or cut when the output is a file or
a pipe (docs/cli.md, "Output formats and schemas"): `eru up --detach > file`, `make demo | tee`, CI logs.

Imported on first print only (rich costs ~40 ms to import; `eru --help` does not pay for it).
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.rule import Rule

UNBOUNDED_WIDTH = 10_000
"""Columns a console has when its stream is not a terminal: wide enough that no table cell folds and no line wraps
(a `Rule` is printed as a short line instead, not 10,000 characters of `─`)."""


class UnwrappedConsole(Console):
    """A console for a file or a pipe: lines never wrapped, tables at their natural width, rules short."""

    def __init__(self, **options: Any) -> None:
        super().__init__(width=UNBOUNDED_WIDTH, soft_wrap=True, **options)

    def rule(self, title: Any = "", *args: Any, **kwargs: Any) -> None:
        """`── title ──` instead of a line across the whole (unbounded) width."""
        self.print(_short_rule(title), highlight=False)

    def print(self, *objects: Any, **kwargs: Any) -> None:
        """As rich's, with rules made short."""
        shown = [_short_rule(item.title) if isinstance(item, Rule) else item for item in objects]
        super().print(*shown, **kwargs)


def _short_rule(title: Any) -> Any:
    from rich.text import Text

    text = title if isinstance(title, Text) else Text.from_markup(str(title)) if title else Text("")
    return Text.assemble("── ", text, " ──") if text.plain else Text("────")


def make_console(*, stderr: bool = False) -> Console:
    """A console on stdout (or stderr): rich's own on a terminal, an `UnwrappedConsole` otherwise."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr)
    return UnwrappedConsole(stderr=stderr)
