"""The web console's HTTP server (aiohttp): login, the static single-page app, the JSON API and the live stream
(docs/console.md). Every route but `/login` answers 401 without a session cookie."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path

import structlog
from aiohttp import web
from aiohttp_sse import sse_response

from eru.bus.connection import redact
from eru.bus.errors import BusError, RemoteError
from eru.console.auth import COOKIE_NAME, SESSION_TTL_SECONDS, Sessions, new_secret
from eru.console.backend import Backend, check_limit
from eru.console.feed import Feed
from eru.console.launch import ConsoleInfo, remove_info
from eru.errors import EruError, InvalidInput

log = structlog.get_logger()

STATIC = resources.files("eru.console") / "static"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the login URL carries a token
    "X-Frame-Options": "DENY",
}
UNAUTHORIZED_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>eru console: log in</title>
<link rel="icon" href="data:,"></head><body><h1>401: not logged in</h1>
<p>Open the login URL printed by <code>eru console url</code> (or by <code>eru up</code>); it is valid once, for
10 minutes.</p></body></html>"""
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
BACKEND = web.AppKey("backend", Backend)
FEED = web.AppKey("feed", Feed)
SESSIONS = web.AppKey("sessions", Sessions)


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """401 without a session (except `/login`); security headers on every answer; eru errors as JSON."""
    if request.path != "/login" and not request.app[SESSIONS].valid(request.cookies.get(COOKIE_NAME), time.time()):
        if request.path.startswith("/api/"):
            response: web.StreamResponse = web.json_response(
                {"error": {"code": "unauthorized", "message": "log in with the URL of `eru console url`"}},
                status=401,
            )
        else:
            response = web.Response(text=UNAUTHORIZED_PAGE, status=401, content_type="text/html")
    else:
        try:
            response = await handler(request)
        except InvalidInput as error:
            response = _error(error, 400)
        except RemoteError as error:
            response = _error(error, _remote_status(error))
        except (BusError, EruError) as error:
            response = _error(error, 502)
    if not response.prepared:
        response.headers.update(SECURITY_HEADERS)
        if request.path.startswith("/api/"):
            response.headers["Cache-Control"] = "no-store"
    return response


def _remote_status(error: RemoteError) -> int:
    """The allocator's `invalid_input` about paging (a forged cursor, a limit) is the browser's bad request (400);
    about an id it names, not found (404, also its `not_found`); anything else a bad gateway (502)."""
    if error.code == "not_found":
        return 404
    if error.code != "invalid_input":
        return 502
    return 400 if error.details.get("field") in PAGING_FIELDS else 404


PAGING_FIELDS = frozenset({"cursor", "limit"})


def _error(error: EruError, status: int) -> web.Response:
    return web.json_response({"error": {"code": error.code, "message": error.message}}, status=status)


async def login(request: web.Request) -> web.StreamResponse:
    """Spend a one-time token and set the session cookie; 401 for a bad, expired or used token."""
    try:
        session = request.app[SESSIONS].login(request.query.get("token", ""), time.time())
    except InvalidInput as error:
        page = UNAUTHORIZED_PAGE.replace("<p>", f"<p>{error.message}.</p><p>", 1)
        return web.Response(text=page, status=401, content_type="text/html")
    response = web.HTTPSeeOther("/#/cluster")
    response.set_cookie(
        COOKIE_NAME, session, httponly=True, samesite="Strict", path="/", max_age=int(SESSION_TTL_SECONDS)
    )
    return response


async def index(_request: web.Request) -> web.StreamResponse:
    """The single-page app."""
    return web.Response(body=(STATIC / "index.html").read_bytes(), content_type="text/html")


async def static(request: web.Request) -> web.StreamResponse:
    """Files shipped in the package (no CDN): the app, its stylesheet and the vendored front-end library."""
    name = request.match_info["name"]
    target = STATIC
    for part in name.split("/"):
        if part in ("", ".", "..") or part.startswith("."):
            raise web.HTTPNotFound()
        target = target / part
    if not target.is_file():
        raise web.HTTPNotFound()
    types = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml", ".txt": "text/plain"}
    kind = types.get(Path(name).suffix, "application/octet-stream")
    return web.Response(body=target.read_bytes(), content_type=kind, headers={"Cache-Control": "no-cache"})


async def api_nodes(request: web.Request) -> web.StreamResponse:
    """A page of node cards: `?q=filter&offset=0&limit=24`."""
    offset = request.query.get("offset", "0")
    if not offset.isdigit():
        raise InvalidInput("offset", f"expected a whole number, got {offset!r}")
    limit = check_limit(request.query.get("limit"), 24, "limit", 200)
    return web.json_response(await request.app[BACKEND].cluster(request.query.get("q", ""), int(offset), limit))


async def api_deploys(request: web.Request) -> web.StreamResponse:
    """A page of deploys with progress, newest first: `?limit=100&cursor=` (the `next_cursor` of the page before)."""
    limit = check_limit(request.query.get("limit"), 100, "limit", 500)
    cursor = request.query.get("cursor") or None
    if cursor is not None and len(cursor) > 1024:
        raise InvalidInput("cursor", "not a cursor from a previous page of this query")
    return web.json_response(await request.app[BACKEND].deploys(limit, cursor))


async def api_deploy(request: web.Request) -> web.StreamResponse:
    """One deploy with its request, decision and events."""
    return web.json_response(await request.app[BACKEND].deploy(request.match_info["deploy_id"]))


async def api_replay(request: web.Request) -> web.StreamResponse:
    """Re-run a recorded decision: `{"same": true|false, "differences": [...]}`."""
    return web.json_response(await request.app[BACKEND].replay(request.match_info["decision_id"]))


async def api_explain(request: web.Request) -> web.StreamResponse:
    """Why an eviction decision chose its victims: the node's window and every batch container considered."""
    return web.json_response(await request.app[BACKEND].explain(request.match_info["decision_id"]))


async def api_evictions(request: web.Request) -> web.StreamResponse:
    """The evictions seen (the last hour at start, then live), newest first."""
    return web.json_response({"evictions": list(request.app[FEED].evictions)})


async def api_tenants(request: web.Request) -> web.StreamResponse:
    """Tenants with dominant shares, quota, limit and waiting requests (`?pod=`)."""
    return web.json_response(await request.app[BACKEND].tenants(request.query.get("pod") or None))


async def api_services(request: web.Request) -> web.StreamResponse:
    """Replicas, health, consumer backlogs, dead letters and (when reported) restarts."""
    return web.json_response(await request.app[BACKEND].services())


async def api_stream(request: web.Request) -> web.StreamResponse:
    """Server-sent events: condition, usage, container, deploy, eviction (and resync when a browser fell behind)."""
    feed = request.app[FEED]
    queue = feed.listen()
    stream = None
    try:
        await feed.followed()  # the container and deploy events flow before the browser hears hello
        async with sse_response(request, headers=SECURITY_HEADERS) as stream:
            await stream.send("{}", event="hello")
            while stream.is_connected() and not feed.closed:
                try:
                    event, data = await asyncio.wait_for(queue.get(), timeout=5.0)
                except TimeoutError:
                    continue  # look again whether the browser is still there (the library pings it)
                await stream.send(data, event=event)
    except ConnectionResetError:
        pass  # the browser left (closed the tab, navigated away): nothing to answer
    finally:
        feed.forget(queue)
    return stream if stream is not None else web.Response(status=204)


def make_app(backend: Backend, feed: Feed, sessions: Sessions) -> web.Application:
    """The aiohttp application (tests build it around their own backend)."""
    app = web.Application(middlewares=[guard])
    app[BACKEND] = backend
    app[FEED] = feed
    app[SESSIONS] = sessions
    app.router.add_get("/login", login)
    app.router.add_get("/", index)
    app.router.add_get("/static/{name:.+}", static)
    app.router.add_get("/api/nodes", api_nodes)
    app.router.add_get("/api/deploys", api_deploys)
    app.router.add_get("/api/deploys/{deploy_id}", api_deploy)
    app.router.add_post("/api/replay/{decision_id}", api_replay)
    app.router.add_get("/api/evictions", api_evictions)
    app.router.add_get("/api/explain/{decision_id}", api_explain)
    app.router.add_get("/api/tenants", api_tenants)
    app.router.add_get("/api/services", api_services)
    app.router.add_get("/api/stream", api_stream)
    return app


async def serve(
    bus_url: str,
    *,
    host: str,
    port: int,
    state_dir: Path,
    on_ready: Callable[[ConsoleInfo], None],
    stop: asyncio.Event | None = None,
) -> None:
    """Connect to the bus, listen on `host:port` (0 = a free port), write `console.json`, call `on_ready`, and run
    until SIGINT/SIGTERM (or `stop`)."""
    from eru.bus.connection import connect

    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    nc = await connect(bus_url, name="eru-console", connect_timeout=5)
    feed = Feed()
    runner: web.AppRunner | None = None
    info: ConsoleInfo | None = None
    try:
        await feed.start(nc)
        sessions = Sessions(secret=new_secret())
        app = make_app(Backend(nc, feed, state_dir=state_dir), feed, sessions)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = int(runner.addresses[0][1])
        shown_host = f"[{host}]" if ":" in host else host
        info = ConsoleInfo(url=f"http://{shown_host}:{bound}/", secret=sessions.secret, pid=_pid(), bus=redact(bus_url))
        info.save(state_dir)
        log.info("console.listening", url=info.url, bus=info.bus)
        on_ready(info)
        await stop.wait()
    finally:
        if info is not None:
            remove_info(state_dir, info.pid)
        feed.closed = True  # the browsers' streams end, so that the server can stop
        if runner is not None:
            await runner.cleanup()
        await feed.stop()
        await nc.close()


def _pid() -> int:
    import os

    return os.getpid()
