"""The CloudEvents envelope lives in `eru.envelope`, below the bus and the store (both use it); re-exported here for
the code that takes it from the bus."""

from eru.envelope import (
    H_CAUSATION,
    H_CONTENT_TYPE,
    H_CORRELATION,
    H_ID,
    H_MSG_ID,
    H_SOURCE,
    H_SPECVERSION,
    H_TIME,
    H_TYPE,
    SPEC_VERSION,
    Envelope,
    format_time,
    new_envelope,
    new_id,
    parse_time,
)

__all__ = [
    "H_CAUSATION",
    "H_CONTENT_TYPE",
    "H_CORRELATION",
    "H_ID",
    "H_MSG_ID",
    "H_SOURCE",
    "H_SPECVERSION",
    "H_TIME",
    "H_TYPE",
    "SPEC_VERSION",
    "Envelope",
    "format_time",
    "new_envelope",
    "new_id",
    "parse_time",
]
