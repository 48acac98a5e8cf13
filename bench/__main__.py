"""`python -m bench report [--quick] [--only STEP,...] [--no-markdown]`: the headline figures (bench/README.md).

Progress on stderr; on stdout the report as one JSON document, then (unless `--no-markdown`) a blank line and the
same figures as a Markdown table (bench/report_table.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from bench.report import STEPS, report
from bench.report_table import render_table


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the report."""
    parser = argparse.ArgumentParser(prog="python -m bench", description="eru's benchmarks (bench/README.md)")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser(
        "report",
        help="run the headline set and print its figures (JSON, then a Markdown table)",
        description="Run the headline benches one after another and print their figures: JSON on stdout, then a "
        "Markdown table; progress on stderr. Steps: " + ", ".join(step.name for step in STEPS) + ".",
    )
    run.add_argument("--quick", action="store_true", help="small sizes that fit in about ten minutes on 2 cores")
    run.add_argument(
        "--only",
        default="",
        help="comma-separated steps to run (the others are rows saying so): " + ",".join(step.name for step in STEPS),
    )
    run.add_argument("--no-markdown", action="store_true", help="print only the JSON")
    args = parser.parse_args(argv)
    only = tuple(name for name in args.only.split(",") if name)
    unknown = [name for name in only if name not in {step.name for step in STEPS}]
    if unknown:
        parser.error(f"--only: unknown step {', '.join(unknown)} (steps: {', '.join(s.name for s in STEPS)})")
    os.chdir(Path(__file__).resolve().parent.parent)  # the commands are written for the project's root

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    result = report(args.quick, only, say)
    print(json.dumps(result, indent=2))
    if not args.no_markdown:
        print()
        print(render_table(result), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
