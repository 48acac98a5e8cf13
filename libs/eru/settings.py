"""Settings for every eru process: environment (`ERU_` prefix, `__` for nesting), an optional TOML/JSON config file.

Settings are validated once at start; a bad value stops the process with one line that names the setting
(`eru.settings.load_settings` turns pydantic's error into `InvalidInput`).
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from eru.bounded import clip
from eru.errors import InvalidInput
from eru.units import format_bytes, parse_bytes

DEFAULT_STATE_DIR = Path(".state")
_FILE_VALUES: ContextVar[dict[str, Any]] = ContextVar("eru_settings_file_values")


def _size(value: object) -> object:
    """A byte size as people write it (`10MiB`, `2G`) or a number of bytes."""
    if isinstance(value, str):
        try:
            return parse_bytes(value.strip(), "bytes")
        except InvalidInput as error:
            raise ValueError(error.reason) from None
    return value


Size = Annotated[int, BeforeValidator(_size)]
LOG_MIN_BYTES = 64 * 1024
STREAM_MIN_BYTES = 1024 * 1024


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _ConfigFileSource(PydanticBaseSettingsSource):
    """The config file's values, ranked below the environment."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return _FILE_VALUES.get({}).get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(_FILE_VALUES.get({}))


class BusSettings(_Section):
    """Where the NATS server is and how long its streams keep things."""

    url: str = "nats://127.0.0.1:4222"
    connect_timeout_seconds: float = Field(default=5.0, gt=0)
    request_timeout_seconds: float = Field(default=5.0, gt=0)
    events_max_age_seconds: int = Field(default=7 * 24 * 3600, gt=0)
    metrics_max_age_seconds: int = Field(default=3600, gt=0)
    # copies of every stream on a NATS cluster: 3 (R3) survives the loss of any one server (docs/deploy.md)
    stream_replicas: int = Field(default=1, ge=1, le=5)
    # Reply subjects start with this; with access control each user may subscribe only to its own (docs/security.md).
    inbox_prefix: str = Field(default="_INBOX", pattern=r"^[A-Za-z0-9_-]+$")
    # Bounded decoding of every body, JSON and msgpack alike (docs/bus.md "Bounded decoding").
    max_body_bytes: int = Field(default=1 << 20, ge=1)
    max_depth: int = Field(default=64, ge=1, le=512)
    max_collection_length: int = Field(default=100_000, ge=1)
    # TLS to the NATS server: trust this CA (else the system's), optionally present a client certificate.
    tls_ca_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None

    @property
    def tls(self) -> bool:
        """True when any TLS setting is given (or the URL asks for tls://)."""
        return self.url.startswith("tls://") or any((self.tls_ca_file, self.tls_cert_file, self.tls_key_file))

    @field_validator("url")
    @classmethod
    def _nats_scheme(cls, value: str) -> str:
        # several comma-separated URLs: the servers of one cluster (docs/deploy.md "The NATS cluster")
        parts = [part.strip() for part in value.split(",")]
        for part in parts:
            if not part.startswith(("nats://", "tls://", "ws://", "wss://")):
                raise ValueError(f"expected a nats:// URL (or several separated by commas), got {part!r}")
        return ",".join(parts)


class StoreSettings(_Section):
    """Where PostgreSQL is."""

    dsn: str = "postgresql://postgres@127.0.0.1:5432/eru"
    pool_min: int = Field(default=1, ge=1)
    pool_max: int = Field(default=10, ge=1)

    @field_validator("dsn")
    @classmethod
    def _postgres_scheme(cls, value: str) -> str:
        if not value.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"expected a postgresql:// DSN, got {value!r}")
        return value


class PlanningSettings(_Section):
    """Defaults of the planning model (docs/planning.md)."""

    share_base: int = Field(default=100, gt=0)
    max_fragment_cores: int = Field(default=-1, ge=-1)
    max_deploy_count: int = Field(default=10_000, gt=0)


class NodeAgentSettings(_Section):
    """The node agent: which node it serves, with which runtime, and how its capacity is derived
    (docs/node-agent.md)."""

    node: str = Field(default_factory=lambda: os.uname().nodename.split(".")[0], pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
    pod: str = Field(default="default", pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
    runtime: Literal["docker", "sim"] = "docker"
    docker_url: str | None = None
    metrics_interval_seconds: float = Field(default=5.0, ge=1.0)
    heartbeat_interval_seconds: float = Field(default=5.0, gt=0)
    memory_fraction: float = Field(default=0.8, gt=0, le=1)
    cpu_cores: int | None = Field(default=None, gt=0)
    memory: int | None = Field(default=None, gt=0)
    max_concurrent_commands: int = Field(default=8, ge=1)
    # commands working on the engine at once, in request order: each container is reported as it starts
    engine_concurrency: int = Field(default=8, ge=1)
    sim_nodes: int = Field(default=1, ge=1)
    sim_seed: int = 0
    stop_timeout_seconds: float = Field(default=5.0, ge=0)
    sim_load: str | None = None  # JSON load model for simulated containers without an `eru.sim.load` label
    # one info line per agent with the commands done since the last (each command is a debug line)
    summary_interval_seconds: float = Field(default=60.0, gt=0)
    # sim only: every node of the process takes its commands through ONE consumer, `node-group-<command_group>`,
    # filtered on exactly its nodes (eru.bus.node_groups; `eru up` sets it to the node prefix and provisions it)
    command_group: str | None = Field(default=None, pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]*$")


class AllocatorSettings(_Section):
    """The allocator: how it consumes, how long it waits, when a silent node counts as down (docs/pipeline.md)."""

    # requests in flight and per batch: a burst of small requests shares one transaction, distributor request and
    # node command message per node among up to 128 (docs/pipeline.md "Performance": 32 cost ~1.4x the CPU)
    deploy_concurrency: int = Field(default=256, ge=1)
    deploy_batch: int = Field(default=128, ge=1)
    # containers per deploy batch: more waits longer for its commit, fewer pays the pod lock and snapshot more often
    deploy_batch_containers: int = Field(default=400, ge=1)
    # decide a pod's next batch while the current one commits (docs/pipeline.md "Performance": plan ahead)
    plan_ahead: bool = True
    event_concurrency: int = Field(default=256, ge=1)
    event_batch: int = Field(default=256, ge=1)
    ack_wait_seconds: float = Field(default=30.0, gt=0)
    place_timeout_seconds: float = Field(default=5.0, gt=0)
    node_down_after_seconds: float = Field(default=30.0, gt=0)
    relay_batch: int = Field(default=500, ge=1)
    # a batch publishes its own outbox rows right after its commit; the relays leave them alone this long (a replica
    # that died before publishing them: a relay publishes them then; docs/store.md "Publishing after the commit").
    # Longer than a starved process may take to publish and mark (a relay would publish a second copy), shorter than
    # JetStream's 120 s duplicate window. 0: every row goes through the relays.
    outbox_hold_seconds: float = Field(default=30.0, ge=0, le=60)
    pending_timeout_seconds: float = Field(default=120.0, gt=0)
    sweep_interval_seconds: float = Field(default=5.0, gt=0)
    # Kept batch workloads and the eviction memory (docs/colocation.md): back-off settings (`KeepConfig` fields),
    # how often the keeper runs, and how long a re-placement waits for room.
    keep: dict[str, Any] = Field(default_factory=dict)
    keep_interval_seconds: float = Field(default=2.0, gt=0)
    keep_wait_seconds: float = Field(default=600.0, gt=0)
    # Replicas split deploy work by pod (docs/replicas.md): the partition count (the same for every replica of a
    # stack) and the TTL of a partition lease, which bounds how long a dead replica's partitions stay unowned.
    partitions: int = Field(default=16, ge=1, le=256)
    # ack_wait of deploy requests (at most ack_wait_seconds): the replica planning one says in-progress every third
    # of it, so a request a killed replica had taken comes back to another within this time.
    deploy_ack_wait_seconds: float = Field(default=6.0, gt=0)
    lease_ttl_seconds: float = Field(default=5.0, ge=1.0)


class EvictionSettings(_Section):
    """The eviction service: watermarks (defaults < pods < nodes, docs/colocation.md) and how replicas split nodes."""

    watermarks: dict[str, Any] = Field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = Field(default_factory=dict)
    nodes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    partitions: int = Field(default=16, ge=1, le=1024)
    lease_ttl_seconds: float = Field(default=6.0, ge=1.0)
    # An unchanged condition is sent again every condition_refresh_seconds while its node runs batch containers and
    # every condition_floor_seconds otherwise (docs/colocation.md "Conditions"); the first also paces the replicas'
    # re-read of the watermark overrides.
    condition_refresh_seconds: float = Field(default=30.0, gt=0)
    condition_floor_seconds: float = Field(default=300.0, gt=0)
    eviction_retry_seconds: float = Field(default=60.0, gt=0)

    @field_validator("condition_floor_seconds")
    @classmethod
    def _floor_not_below_refresh(cls, value: float, info: ValidationInfo) -> float:
        refresh = info.data.get("condition_refresh_seconds")
        if refresh is not None and value < refresh:
            raise ValueError(f"must be at least condition_refresh_seconds ({refresh:g}), got {value:g}")
        return value


class ReconcileSettings(_Section):
    """The reconciler of the ledger with the nodes' inventories (docs/operations.md "Reconciling the ledger")."""

    enabled: bool = True
    # an eru container of the node that the ledger does not hold: stop and remove it, or only report it
    unknown: Literal["remove", "report"] = "remove"
    # applied resources that differ from the ledger's: set the ledger's again, or only report them
    drift: Literal["reapply", "report"] = "reapply"
    # clock skew allowed between node agents and PostgreSQL (the race rule)
    grace_seconds: float = Field(default=10.0, ge=0)


class Settings(BaseSettings):
    """All settings of an eru process; each service reads the parts it needs."""

    model_config = SettingsConfigDict(env_prefix="ERU_", env_nested_delimiter="__", extra="forbid")

    replica: str = Field(default_factory=lambda: f"{os.uname().nodename}-{os.getpid()}")
    state_dir: Path = DEFAULT_STATE_DIR
    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    bus: BusSettings = BusSettings()
    store: StoreSettings = StoreSettings()
    planning: PlanningSettings = PlanningSettings()
    node_agent: NodeAgentSettings = NodeAgentSettings()
    allocator: AllocatorSettings = AllocatorSettings()
    eviction: EvictionSettings = EvictionSettings()
    reconcile: ReconcileSettings = ReconcileSettings()
    # every node agent publishes its full inventory at start and this often (ERU_INVENTORY_SECONDS)
    inventory_seconds: float = Field(default=30.0, gt=0)
    health_port: int = Field(default=0, ge=0, le=65535)
    # How long a request waits out a PostgreSQL outage (retried with backoff), then `store_unavailable` (docs/store.md)
    store_retry_seconds: float = Field(default=120.0, ge=0)
    drain_timeout_seconds: float = Field(default=10.0, gt=0)
    # How long finished records (removed containers, ended deploys, decisions, events) are kept (docs/operations.md).
    retention_seconds: int = Field(default=7 * 24 * 3600, ge=60)
    # Byte cap per stream name, over the defaults of eru.bus.streams.DEFAULT_STREAM_MAX_BYTES, e.g. {"ERU_NODE": 1e9}.
    stream_max_bytes: dict[str, Size] = Field(default_factory=dict)
    # Each process's log file rotates at this size, keeping `log_backups` older files (docs/operations.md "Logs").
    log_max_bytes: Size = 50 * 1024 * 1024
    log_backups: int = Field(default=3, ge=1, le=100)
    # Per-request lines are at debug; every this often a service logs one `service.summary` line at info with the
    # counts, rates and latencies of its per-request work (eru.activity, docs/operations.md "Logs").
    log_summary_seconds: float = Field(default=60.0, gt=0)
    # CPython's young-generation GC threshold for every service; 0 leaves the 10,000 of eru.gc_tuning.THRESHOLDS
    # (docs/performance.md "Garbage collection").
    gc_threshold: int = Field(default=50_000, ge=0, le=10_000_000)
    # The file a service writes its log lines to, rotated (ERU_LOG_FILE; `eru up` sets it); unset: stderr.
    log_file: Path | None = None
    # The event loop every service runs on (ERU_EVENT_LOOP): CPython's own asyncio loop, or uvloop's (libuv: less CPU
    # per message and round trip, docs/performance.md "The event loop").
    event_loop: Literal["uvloop", "asyncio"] = "asyncio"

    @field_validator("stream_max_bytes")
    @classmethod
    def _known_streams(cls, value: dict[str, int]) -> dict[str, int]:
        known = ("ERU_DEPLOY", "ERU_NODE", "ERU_EVENTS", "ERU_METRICS", "ERU_DLQ", "ERU_PARTITIONS")
        for name, cap in value.items():
            if name not in known:
                raise ValueError(f"unknown stream {name!r} (streams: {', '.join(known)})")
            if cap < STREAM_MIN_BYTES:
                raise ValueError(f"{name} cap must be at least 1 MiB, got {cap}")
        return value

    @field_validator("log_max_bytes")
    @classmethod
    def _rotates_at_a_real_size(cls, value: int) -> int:
        if value < LOG_MIN_BYTES:
            raise ValueError(f"must be at least 64 KiB, got {format_bytes(value)}")
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Precedence: explicit overrides, then `ERU_*` environment, then the config file, then defaults."""
        return (init_settings, env_settings, _ConfigFileSource(settings_cls))


def _read_config_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as error:
        raise InvalidInput("config_file", f"cannot read {path}: {error.strerror}") from None
    try:
        data: object = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise InvalidInput("config_file", f"{path} is not valid {path.suffix.lstrip('.') or 'JSON'}: {error}") from None
    if not isinstance(data, dict):
        raise InvalidInput("config_file", f"{path} must hold a table/object at the top level")
    return data


def describe_validation_error(error: ValidationError, prefix: str = "") -> InvalidInput:
    """The first problem of a pydantic error as one `InvalidInput` naming the dotted field path."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(root)"
    if prefix:
        field = f"{prefix}.{field}" if field != "(root)" else prefix
    reason = first["msg"].removeprefix("Value error, ")
    if "input" in first and first["type"] not in ("missing", "value_error"):
        value = first["input"]  # a 120 KB value is not echoed whole
        reason = f"{reason} (got {clip(value)!r})" if isinstance(value, str) else f"{reason} (got {clip(repr(value))})"
    more = len(error.errors()) - 1
    if more:
        reason += f" (and {more} more problem{'s' if more > 1 else ''})"
    return InvalidInput(field, reason)


def load_settings(config_file: Path | None = None, **overrides: Any) -> Settings:
    """Settings from (lowest first) defaults, the config file (`ERU_CONFIG_FILE` or argument), environment, overrides.

    Raises `InvalidInput` naming the setting (for environment variables, `ERU_` + the path with `__`).
    """
    path = config_file or (Path(os.environ["ERU_CONFIG_FILE"]) if os.environ.get("ERU_CONFIG_FILE") else None)
    file_values = _read_config_file(path) if path else {}
    saved = os.environ.pop("ERU_CONFIG_FILE", None)
    token = _FILE_VALUES.set(file_values)
    try:
        settings = Settings(**overrides)
    except ValidationError as error:
        problem = describe_validation_error(error)
        env_name = "ERU_" + problem.field.replace(".", "__").upper()
        raise InvalidInput(f"{problem.field} (env {env_name})", problem.reason) from None
    except SettingsError as error:  # a value the environment source could not even parse (JSON of a map or list)
        found = re.search(r'field "([^"]+)"', str(error))
        field = found.group(1) if found else "(settings)"
        reason = "not valid JSON (maps and lists are given as JSON)"
        raise InvalidInput(f"{field} (env ERU_{field.upper()})", reason) from None
    finally:
        _FILE_VALUES.reset(token)
        if saved is not None:
            os.environ["ERU_CONFIG_FILE"] = saved
    return settings
