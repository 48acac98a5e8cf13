"""structlog set up once per process: JSON lines when stderr is not a TTY, readable console output when it is.

Context (service, replica, node, deploy id, correlation id) is bound with `structlog.contextvars`, so every log line
of a handler carries the ids of the message it is working on.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

from eru.redaction import redact_event

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(
    service: str,
    replica: str,
    *,
    log_format: Literal["auto", "json", "console"] = "auto",
    level: str = "info",
) -> None:
    """Configure structlog for this process and bind `service` and `replica` to every line."""
    use_json = log_format == "json" or (log_format == "auto" and not sys.stderr.isatty())
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            redact_event,  # no password of a URL or DSN in any log line, tracebacks included (docs/security.md)
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service=service, replica=replica)
