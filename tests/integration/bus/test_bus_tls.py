"""TLS to a real nats-server: a client trusting the server's CA connects; one that does not is told why."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from eru.bus.connection import connect, tls_context
from eru.bus.errors import BusUnavailable
from eru.errors import InvalidInput
from eru.testing.nats_server import NatsServer


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture
def certificates(tmp_path: Path) -> Path:
    """A throwaway CA and a server certificate for 127.0.0.1 signed by it."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=eru-test-ca",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=tmp_path)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", "server.key",
             "-out", "server.csr", cwd=tmp_path)  # fmt: skip
    (tmp_path / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "1", "-extfile", "san.ext", "-out", "server.pem", cwd=tmp_path)  # fmt: skip
    return tmp_path


@pytest.fixture
def tls_server(certificates: Path, tmp_path: Path) -> Iterator[NatsServer]:
    config = tmp_path / "tls.conf"
    config.write_text(
        f'tls {{ cert_file: "{certificates / "server.pem"}", key_file: "{certificates / "server.key"}" }}\n'
    )
    server = NatsServer(store_dir=tmp_path / "nats", config_file=config)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_a_client_trusting_the_ca_connects(tls_server: NatsServer, certificates: Path) -> None:
    url = tls_server.url.replace("nats://", "tls://")
    client = await connect(url, name="tls-test", connect_timeout=5, tls=tls_context(certificates / "ca.pem"))
    try:
        assert client.is_connected
        await client.publish("eru.test", b"over tls")
        await client.flush()
    finally:
        await client.close()


async def test_an_untrusted_server_is_one_clear_error(tls_server: NatsServer) -> None:
    url = tls_server.url.replace("nats://", "tls://")
    with pytest.raises(BusUnavailable, match="certificate"):
        await connect(url, name="tls-test", connect_timeout=2, tls=tls_context(None))


def test_bad_tls_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"bus\.tls_ca_file"):
        tls_context(tmp_path / "missing.pem")
    (tmp_path / "junk.pem").write_text("not a certificate")
    with pytest.raises(InvalidInput, match=r"bus\.tls_ca_file"):
        tls_context(tmp_path / "junk.pem")
    with pytest.raises(InvalidInput, match="key"):
        tls_context(None, cert_file=tmp_path / "junk.pem")
