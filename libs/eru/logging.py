"""structlog set up once per process: JSON lines when stderr is not a TTY, readable console output when it is.

Context (service, replica, node, deploy id, correlation id) is bound with `structlog.contextvars`, so every log line
of a handler carries the ids of the message it is working on. With a log file (`ERU_LOG_FILE`, set by `eru up`) the
rendered lines go through the standard library's `RotatingFileHandler`: at `max_bytes` the file is renamed to `.1`
(`.1` to `.2`, …) and `backups` old files are kept, so a process never holds more than (backups + 1) × max_bytes of
logs (docs/operations.md "Logs").
"""

from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path
from typing import Any, Literal

import structlog

from eru.redaction import redact_event

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


DEFAULT_MAX_BYTES = 50 * 1024 * 1024
DEFAULT_BACKUPS = 3


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """Every file it opens (the first and each after a rotation) is readable by the owner only: logs may name
    tenants, hosts and ids (docs/security.md)."""

    def _open(self) -> Any:
        stream = super()._open()
        os.chmod(self.baseFilename, 0o600)
        return stream


class RotatingLineLogger:
    """A structlog logger that hands each rendered line to a `RotatingFileHandler` (levels are already filtered)."""

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.handler = _PrivateRotatingFileHandler(path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8")
        self.handler.setFormatter(logging.Formatter("%(message)s"))

    def msg(self, message: str) -> None:
        """Write one line (rotating first when it would pass the size)."""
        record = logging.LogRecord("eru", logging.INFO, "", 0, message, None, None)
        self.handler.handle(record)

    log = debug = info = warning = warn = error = critical = exception = fatal = msg

    def close(self) -> None:
        """Close the file."""
        self.handler.close()


_file_logger: RotatingLineLogger | None = None


class _CurrentStderr:
    """Whatever `sys.stderr` is when a line is written, not when logging was configured: a caller that swaps it for a
    while (a test's capture, typer's CliRunner) and closes its own afterwards must not leave every later log line of
    the process writing to a closed file ("I/O operation on closed file", which made a responder's error path fail
    and its request go unanswered)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(
    service: str,
    replica: str,
    *,
    log_format: Literal["auto", "json", "console"] = "auto",
    level: str = "info",
    log_file: Path | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
    backups: int = DEFAULT_BACKUPS,
) -> None:
    """Configure structlog for this process and bind `service` and `replica` to every line; with `log_file`, lines
    go to that file, rotated at `max_bytes` with `backups` older files kept."""
    global _file_logger
    if _file_logger is not None:
        _file_logger.close()
        _file_logger = None
    # PrintLogger only calls write and flush; typeshed asks for a whole TextIO
    factory: Any = structlog.PrintLoggerFactory(file=_CurrentStderr())  # type: ignore[arg-type]
    to_terminal = sys.stderr.isatty()
    if log_file is not None:
        file_logger = _file_logger = RotatingLineLogger(Path(log_file), max_bytes, backups)
        factory = lambda *_: file_logger  # noqa: E731 -- structlog wants a factory; every logger shares the file
        to_terminal = False
    use_json = log_format == "json" or (log_format == "auto" and not to_terminal)
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if use_json else structlog.dev.ConsoleRenderer(colors=to_terminal)
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
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(service=service, replica=replica)
