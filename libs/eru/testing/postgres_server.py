"""The PostgreSQL tests start: `eru.embedded.postgres_server`'s, re-exported for the tests and benches that import it
from here."""

from eru.embedded.postgres_server import (
    SUPERUSER,
    TUNED_SETTINGS,
    EmbeddedPostgres,
    PostgresServerError,
    free_port,
)

__all__ = ["SUPERUSER", "TUNED_SETTINGS", "EmbeddedPostgres", "PostgresServerError", "free_port"]
