"""One runner for all four services: start, readiness, health, signals, drain, clean shutdown.

A service is an async `main(ctx)` that starts its consumers and returns when `ctx.stopping` is set (after finishing
in-flight work). The runner owns everything around it:

1. settings are validated and logging configured before anything connects;
2. the bus (and the store, for services that need it, with migrations applied) is connected, and an unreachable
   server is one line naming it, exit code 3;
3. the replica registers as a NATS micro service (`$SRV.PING/INFO/STATS` answer with its name, version, replica and
   load), which is how `eru status` finds every running replica;
4. an optional loopback HTTP endpoint answers `/healthz` and `/readyz` (for docker-compose health checks);
5. SIGTERM/SIGINT set `ctx.stopping`; `main` has `drain_timeout_seconds` to finish, then it is cancelled, the NATS
   connection is drained and the pool closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext

from eru import __version__, gc_tuning, telemetry
from eru.activity import ACTIVITY, Activity
from eru.errors import EruError, InvalidInput
from eru.gc_tuning import collect_less
from eru.logging import configure_logging
from eru.redaction import redact_text as redact
from eru.settings import Settings, load_settings

EXIT_CONFIG = 2
EXIT_UNREACHABLE = 3
EXIT_CRASHED = 1

log = structlog.get_logger()


@dataclass
class ServiceContext:
    """What a running service gets from the runner."""

    name: str
    settings: Settings
    nc: Client
    js: JetStreamContext
    pool: asyncpg.Pool | None
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    load: dict[str, float] = field(default_factory=dict)


ServiceMain = Callable[[ServiceContext], Coroutine[Any, Any, None]]


async def _health_server(ctx: ServiceContext, port: int) -> asyncio.Server:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            request_line = (await reader.readline()).decode(errors="replace")
            path = request_line.split(" ")[1] if request_line.count(" ") >= 2 else "/"
            healthy = not ctx.stopping.is_set()
            content_type = "text/plain; charset=utf-8"
            if path == "/metrics":
                status = "200 OK"
                body, content_type = telemetry.render()
            elif path in ("/healthz", "/readyz", "/"):
                ok = healthy and (path != "/readyz" or ctx.ready.is_set())
                status = "200 OK" if ok else "503 Service Unavailable"
                body = b"ok\n" if ok else b"not ready\n"
            else:
                status, body = "404 Not Found", b"not found: try /healthz, /readyz or /metrics\n"
            head = f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            writer.write(f"{head}Connection: close\r\n\r\n".encode() + body)
            await writer.drain()
        writer.close()

    return await asyncio.start_server(answer, host="127.0.0.1", port=port)


def _metadata(settings: Settings, service: str = "") -> dict[str, str]:
    """What `$SRV.INFO`/`$SRV.STATS` tell about a replica: its name and, when it serves one, its `/metrics` URL (so that
    `eru status` lists it for any stack, docs/operations.md); an eviction replica adds the watermarks its environment
    gives (JSON, eru.colocation.overrides.environment_watermarks) for `eru status` (docs/colocation.md)."""
    metadata = {"replica": settings.replica}
    if settings.health_port:
        metadata["metrics"] = f"http://127.0.0.1:{settings.health_port}/metrics"
    if service == "eviction":
        import json

        from eru.colocation.overrides import environment_watermarks
        from eru.errors import InvalidInput

        environment = settings.eviction.model_dump(include={"watermarks", "pods", "nodes"})
        with contextlib.suppress(InvalidInput):  # an environment that clashes stops the replica at its start
            metadata["watermarks"] = json.dumps(environment_watermarks(environment), separators=(",", ":"))
    return metadata


async def _register_micro_service(ctx: ServiceContext) -> Any:
    from nats import micro

    from eru.bus.subjects import service_health

    def stats_handler(_endpoint: Any) -> dict[str, Any]:
        return {"replica": ctx.settings.replica, "ready": ctx.ready.is_set(), **ctx.load}

    service = await micro.add_service(
        ctx.nc,
        name=f"eru-{ctx.name}",
        version=__version__,
        description=f"eru {ctx.name}",
        metadata=_metadata(ctx.settings, ctx.name),
        stats_handler=stats_handler,
    )

    async def health(request: Any) -> None:
        await request.respond(b"ready" if ctx.ready.is_set() else b"starting")

    await service.add_endpoint(name="health", subject=service_health(ctx.name, ctx.settings.replica), handler=health)
    return service


async def summarize(activity: Activity, every: float, stop: asyncio.Event) -> None:
    """Log `activity`'s summary at info every `every` seconds (nothing when nothing was counted) and once more at
    `stop`, so that a burst of requests costs a constant number of info lines (docs/operations.md "Logs")."""
    loop = asyncio.get_running_loop()
    activity.start(loop.time())
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=every)
        summary = activity.take(loop.time())
        if summary is not None:
            log.info("service.summary", **summary)
        if stop.is_set():
            return


async def _freeze_when_ready(ctx: ServiceContext) -> None:
    """Once the service is ready, move what it allocated while starting out of the collector's way (eru.gc_tuning)."""
    await ctx.ready.wait()
    if ctx.settings.gc_threshold > 0:
        frozen = gc_tuning.freeze_started()
        log.debug("service.gc_frozen", objects=frozen, thresholds=list(gc_tuning.tune(0)))


async def serve(name: str, main: ServiceMain, settings: Settings, *, needs_store: bool) -> None:
    """Run `main` under the runner until a signal or until it returns; raises `EruError` for startup problems."""
    from eru.bounded import DecodeLimits
    from eru.bus.codec import set_decode_limits
    from eru.bus.connection import connect, tls_context

    structlog.contextvars.bind_contextvars(service=name, replica=settings.replica)
    gc_tuning.tune(settings.gc_threshold)
    bus = settings.bus
    set_decode_limits(DecodeLimits(bus.max_body_bytes, bus.max_depth, bus.max_collection_length))
    tls = tls_context(bus.tls_ca_file, bus.tls_cert_file, bus.tls_key_file) if bus.tls else None
    nc = await connect(
        settings.bus.url,
        name=f"eru-{name}-{settings.replica}",
        connect_timeout=settings.bus.connect_timeout_seconds,
        inbox_prefix=settings.bus.inbox_prefix,
        tls=tls,
    )
    pool = None
    summaries: asyncio.Task[None] | None = None
    try:
        if needs_store:
            from eru.store.migrate import apply_migrations
            from eru.store.pool import create_pool

            pool = await create_pool(
                settings.store.dsn, min_size=settings.store.pool_min, max_size=settings.store.pool_max
            )
            await apply_migrations(pool)
        ctx = ServiceContext(name=name, settings=settings, nc=nc, js=nc.jetstream(), pool=pool)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, ctx.stopping.set)
        micro_service = await _register_micro_service(ctx)
        health = await _health_server(ctx, settings.health_port) if settings.health_port else None
        log.info(
            "service.starting", version=__version__, bus=redact(settings.bus.url), health_port=settings.health_port
        )
        task: asyncio.Task[None] = asyncio.create_task(main(ctx), name=f"{name}-main")
        summaries_done = asyncio.Event()
        summaries = asyncio.create_task(summarize(ACTIVITY, settings.log_summary_seconds, summaries_done))
        freezer = asyncio.create_task(_freeze_when_ready(ctx))
        stop_wait = asyncio.create_task(ctx.stopping.wait())
        await asyncio.wait({task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            log.info("service.draining", timeout=settings.drain_timeout_seconds)
            try:
                await asyncio.wait_for(asyncio.shield(task), settings.drain_timeout_seconds)
            except TimeoutError:
                log.warning("service.drain_timeout", timeout=settings.drain_timeout_seconds)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        stop_wait.cancel()
        freezer.cancel()
        summaries_done.set()
        await summaries
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
        await micro_service.stop()
        if health is not None:
            health.close()
            await health.wait_closed()
        log.info("service.stopped")
    finally:
        if summaries is not None and not summaries.done():
            summaries.cancel()
        with contextlib.suppress(Exception):
            await nc.drain()
        if pool is not None:
            await pool.close()


def loop_runner(event_loop: str) -> Callable[[Coroutine[Any, Any, None]], None]:
    """`asyncio.run` on the event loop the settings name: uvloop's (less CPU per message, task and round trip:
    docs/performance.md "The event loop") or CPython's."""
    if event_loop == "uvloop":
        import uvloop  # imported only where it runs: the asyncio setting never needs it

        return uvloop.run
    return asyncio.run


def run(name: str, main: ServiceMain, *, needs_store: bool, **overrides: Any) -> int:
    """Process entry point of a service: load settings, configure logging, serve; returns the exit code.

    Startup problems (bad configuration, an unreachable server) print one line naming the culprit, no traceback.
    """
    try:
        settings = load_settings(**overrides)
    except InvalidInput as error:
        print(f"eru-{name}: invalid configuration: {error.message}", file=sys.stderr)
        return EXIT_CONFIG
    configure_logging(
        name,
        settings.replica,
        log_format=settings.log_format,
        level=settings.log_level,
        log_file=settings.log_file,
        max_bytes=settings.log_max_bytes,
        backups=settings.log_backups,
    )
    collect_less()  # about a fifth of a service's CPU went to the garbage collector (eru.gc_tuning)
    try:
        loop_runner(settings.event_loop)(serve(name, main, settings, needs_store=needs_store))
    except InvalidInput as error:
        print(f"eru-{name}: invalid input: {error.message}", file=sys.stderr)
        return EXIT_CONFIG
    except EruError as error:
        print(f"eru-{name}: {error.message}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return 0
    except Exception as error:  # a bug or an unexpected server answer: the log line keeps the traceback
        log.exception("service.crashed", error=repr(error))
        print(f"eru-{name}: stopped by an unexpected error: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_CRASHED
    return 0
