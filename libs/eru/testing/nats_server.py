"""The JetStream `nats-server` tests start: `eru.embedded.nats_server`'s, re-exported for the tests and benches that
import it from here."""

from eru.embedded.nats_server import (
    NatsServer,
    NatsServerError,
    find_binary,
    free_port,
    non_loopback_addresses,
    server_info,
)

__all__ = ["NatsServer", "NatsServerError", "find_binary", "free_port", "non_loopback_addresses", "server_info"]
