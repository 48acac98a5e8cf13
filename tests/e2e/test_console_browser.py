"""The web console in a real browser (Debian's headless chromium + chromedriver, driven by selenium) against a real
stack started by `eru up` (embedded NATS and PostgreSQL, the four services, 2 sim nodes, access control on).

As a person uses it: a page without the login token answers 401; the login URL of `eru console url` works once; a
deploy sent through the bus appears on the right nodes' core maps without a reload; an eviction appears; Replay
says "same"; every page is saved as a screenshot under test-artifacts/console/; the browser logs no error.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from console_browser import chromium, missing_browser, screenshot, severe_logs, wait_until

from eru.testing.nats_server import free_port

REASON = missing_browser()
if REASON is not None:
    print(f"\nSKIPPING the console browser tests: {REASON}", file=sys.stderr)
    pytest.skip(f"console browser tests need a real browser: {REASON}", allow_module_level=True)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
ERU = [sys.executable, "-m", "eru.cli"]
GIB = 1024**3


def _wait(predicate: Any, seconds: float, what: str) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


class Stack:
    """A stack started by `eru up` in the foreground (stopped with Ctrl-C at the end)."""

    def __init__(self, root: Path) -> None:
        self.state_dir = root / "state"
        args = [*ERU, "up", "--state-dir", str(self.state_dir), "--sim-nodes", "2"]
        args += ["--nats-port", str(free_port()), "--postgres-port", str(free_port())]
        args += ["--console-port", str(free_port())]
        self.supervisor = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    @property
    def info(self) -> dict[str, Any]:
        return dict(json.loads((self.state_dir / "stack.json").read_text()))

    @property
    def console_url(self) -> str:
        return str(json.loads((self.state_dir / "console.json").read_text())["url"])

    def login_url(self) -> str:
        result = subprocess.run(
            [*ERU, "console", "url", "--state-dir", str(self.state_dir)], capture_output=True, text=True, timeout=30
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()

    def bus(self, work: Any) -> Any:
        """Run `work(nc)` on a fresh admin connection to the stack's NATS (the test speaks as a node agent, which
        the operator's URL in stack.json may not: docs/security.md)."""
        from eru.bus import connect

        admin = self.state_dir / "auth" / "admin.url"
        url = admin.read_text().strip() if admin.exists() else self.info["nats_url"]

        async def main() -> Any:
            nc = await connect(url, name="console-test")
            try:
                return await work(nc)
            finally:
                await nc.close()

        return asyncio.run(main())

    def stop(self) -> None:
        if self.supervisor.poll() is None:
            self.supervisor.send_signal(signal.SIGINT)
            try:
                self.supervisor.wait(60)
            except subprocess.TimeoutExpired:
                self.supervisor.kill()


PORT_RACE = ("already in use", "could not create any TCP/IP sockets", "address already in use")


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    root = Path(tempfile.mkdtemp(prefix="eru-console-"))
    running: Stack | None = None
    try:
        for attempt in range(3):
            running = Stack(root / f"try-{attempt}")
            _wait(
                lambda r=running: (r.state_dir / "stack.json").exists() or r.supervisor.poll() is not None,
                120,
                "stack.json",
            )
            if running.supervisor.poll() is None:
                break
            output = running.supervisor.stdout.read().decode() if running.supervisor.stdout else ""
            # a free port taken by another process between free_port() and the server's bind: try other ports
            assert any(reason in output for reason in PORT_RACE), output
            assert attempt < 2, output
        assert running is not None
        yield running
    finally:
        if running is not None:
            running.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def browser(stack: Stack) -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def _status(url: str, method: str = "GET") -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_without_the_token_every_page_and_api_answers_401(stack: Stack, browser: Any) -> None:
    base = stack.console_url.rstrip("/")
    paths = ["/", "/static/app.js", "/api/nodes", "/api/deploys", "/api/services", "/api/stream", "/api/evictions"]
    assert {path: _status(base + path) for path in paths} == dict.fromkeys(paths, 401)
    assert _status(base + "/api/replay/x", "POST") == 401
    assert _status(base + "/login?token=forged.9999999999.abcdef") == 401
    browser.get(base + "/")
    wait_until(browser, lambda: "401" in browser.find_element("tag name", "h1").text, "the 401 page")
    screenshot(browser, "00-login-required", full_page=False)
    severe_logs(browser)  # the 401 itself is logged by chromium as a failed load: read and set aside


def test_login_url_works_once_and_shows_the_cluster(stack: Stack, browser: Any) -> None:
    login = stack.login_url()
    browser.get(login)
    wait_until(browser, lambda: len(browser.find_elements("css selector", "article.node")) == 2, "2 node cards")
    assert browser.current_url.endswith("/#/cluster")
    names = {e.get_attribute("data-node") for e in browser.find_elements("css selector", "article.node")}
    assert names == {"sim-001", "sim-002"}
    wait_until(browser, lambda: browser.find_element("css selector", "[data-live]").text == "live", "the live feed")
    assert _status(login) == 401  # a login token is spent by its first use
    assert severe_logs(browser) == []


def _deploy(stack: Stack, count: int) -> Any:
    from eru.cli.deploy_commands import deploy_and_follow
    from eru.domain import DeployRequest

    request = DeployRequest.model_validate(
        {
            "pod": "default",
            "workload": {
                "name": "web",
                "image": "busybox",
                "resources": {"cpu_bind": True, "cpu_request": 2, "memory_request": "1GiB"},
            },
            "count": count,
        }
    )
    return stack.bus(lambda nc: deploy_and_follow(nc, request, timeout=60))


def test_a_deploy_appears_on_the_right_core_maps_without_reload(stack: Stack, browser: Any) -> None:
    browser.execute_script("window.__noReload = 'still the same page'")
    result = _deploy(stack, 3)
    assert result.terminal.kind == "completed"
    for container in result.containers:
        cores = sorted(container["allocation"]["cpu_map"])
        assert len(cores) == 2
        selector = f'article.node[data-node="{container["node"]}"] .piece.whole[data-container="{container["id"]}"]'
        wait_until(
            browser,
            lambda s=selector: len(browser.find_elements("css selector", s)) == 2,
            f"container {container['id']} on {container['node']}'s core map",
        )
        drawn = {
            e.find_element("xpath", "..").get_attribute("data-core")
            for e in browser.find_elements("css selector", selector)
        }
        assert drawn == set(cores)
        others = f'article.node:not([data-node="{container["node"]}"]) [data-container="{container["id"]}"]'
        assert browser.find_elements("css selector", others) == []
    assert browser.execute_script("return window.__noReload") == "still the same page"
    screenshot(browser, "01-cluster")
    assert severe_logs(browser) == []


def test_deploy_page_shows_request_decision_events_and_replay_says_same(stack: Stack, browser: Any) -> None:
    browser.execute_script("window.__noReload = 'deploys'")
    browser.find_element("css selector", 'a[data-page="deploys"]').click()
    result = _deploy(stack, 1)
    row = f'tr[data-deploy="{result.deploy_id}"]'
    wait_until(browser, lambda: browser.find_elements("css selector", row), "the new deploy in the live list")
    wait_until(browser, lambda: "1/1" in browser.find_element("css selector", row + " .progress").text, "progress 1/1")
    assert browser.execute_script("return window.__noReload") == "deploys"
    older = browser.find_element("xpath", "//button[text()='older ›']")  # one page of deploys so far: nothing older
    assert older.get_attribute("disabled") is not None
    screenshot(browser, "02-deploys")
    browser.find_element("css selector", row + " a").click()
    wait_until(browser, lambda: "placed" in browser.page_source and "events (" in browser.page_source, "deploy page")
    (chosen,) = {c["node"] for c in result.containers}
    (other,) = {"sim-001", "sim-002"} - {chosen}
    page = browser.find_element("css selector", "main").text
    assert "not chosen (1: 1 room_unused)" in page.lower()  # counted by reason (not_chosen_counts, docs/cli.md)
    reason = browser.find_element("xpath", f"//td[text()='{other}']/..").text
    assert "placed them elsewhere" in reason  # the other node had room: the mode chose (docs/console.md)
    assert "eru.deploy.planned" in page
    assert "eru.deploy.completed" in page
    browser.find_element("xpath", "//button[text()='Replay']").click()
    verdict = wait_until(browser, lambda: browser.find_elements("css selector", "[data-verdict]"), "the replay verdict")
    assert verdict[0].get_attribute("data-verdict") == "same"
    screenshot(browser, "03-deploy")
    assert severe_logs(browser) == []


def _hot_node_samples(node: str) -> list[Any]:
    """Three samples of a 32-core, 64 GiB node, the last at 45 GiB used (≥ the 70 % memory-evict watermark)."""
    from eru.domain import ContainerMetrics, NodeMetrics

    def container(cid: str, cls: str, memory: int, priority: int) -> ContainerMetrics:
        return ContainerMetrics(
            container_id=cid,
            priority_class=cls,  # type: ignore[arg-type]
            priority=priority,
            tenant="default",
            cpu_used=1.0,
            memory_used=memory,
            cpu_request=2,
            memory_request=memory,
        )

    now = time.time()
    samples = []
    for age, used in ((4, 30 * GIB), (2, 35 * GIB), (0, 45 * GIB)):
        containers = [container("prod-1", "prod", 20 * GIB, 0)]
        containers += [container(f"batch-{i}", "batch", 4 * GIB, i) for i in range(3)]
        samples.append(
            NodeMetrics(
                node=node,
                time=now - age,
                cpu_capacity=32,
                cpu_used=8,
                memory_used=used,
                memory_total=64 * GIB,
                containers=containers,
                pod="default",
            )
        )
    return samples


def test_an_eviction_appears_live_and_replays_the_same(stack: Stack, browser: Any) -> None:
    from eru.bus import new_envelope, publish

    node = f"hot-{os.getpid()}"
    browser.find_element("css selector", 'a[data-page="evictions"]').click()
    wait_until(browser, lambda: browser.find_elements("css selector", "main section"), "the evictions page")
    browser.execute_script("window.__noReload = 'evictions'")

    async def send(nc: Any) -> None:
        js = nc.jetstream()
        for sample in _hot_node_samples(node):
            await publish(js, f"eru.metrics.{node}", sample, new_envelope("eru.metrics", f"node-agent/{node}"))

    stack.bus(send)
    card = f'article.eviction[data-node="{node}"]'
    wait_until(browser, lambda: browser.find_elements("css selector", card), "the eviction card", seconds=60)
    text = browser.find_element("css selector", card).text
    assert "evict" in text
    assert "memory" in text
    assert "batch-0" in text  # the lowest-priority batch container goes first
    assert browser.execute_script("return window.__noReload") == "evictions"
    browser.find_element("css selector", card + " button").click()
    verdict = wait_until(browser, lambda: browser.find_elements("css selector", card + " [data-verdict]"), "verdict")
    assert verdict[0].get_attribute("data-verdict") == "same"
    screenshot(browser, "04-evictions")
    assert severe_logs(browser) == []


def test_tenants_and_services_pages(stack: Stack, browser: Any) -> None:
    created = subprocess.run(
        [*ERU, "tenant", "create", "analytics", "--weight", "2", "--quota", "cpu=4", "--limit", "memory=16GiB"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "ERU_STATE_DIR": str(stack.state_dir)},
    )
    assert created.returncode == 0, created.stderr
    browser.find_element("css selector", 'a[data-page="tenants"]').click()
    other = wait_until(browser, lambda: browser.find_elements("css selector", 'tr[data-tenant="analytics"]'), "new")
    assert "cpu=4" in other[0].text
    assert "memory=16 GiB" in other[0].text
    row = wait_until(browser, lambda: browser.find_elements("css selector", 'tr[data-tenant="default"]'), "tenants")
    assert "cpu" in row[0].text  # the default tenant holds the deploys' cores: its dominant resource
    screenshot(browser, "05-tenants")
    browser.find_element("css selector", 'a[data-page="services"]').click()
    wait_until(
        browser,
        lambda: len(browser.find_elements("css selector", "tr[data-service] .badge.ok")) >= 4,
        "four ready services",
    )
    page = browser.find_element("css selector", "main").text
    for expected in ("allocator", "distributor", "eviction", "node-agent", "allocator-deploy", "dead letters"):
        assert expected in page
    screenshot(browser, "06-services")
    assert severe_logs(browser) == []


def test_phone_width_and_a_thousand_nodes(stack: Stack, browser: Any) -> None:
    from eru.bus import request
    from eru.bus.subjects import allocator_operation
    from eru.domain.messages import OperationReply, SetNodeRequest

    async def add_nodes(nc: Any) -> None:
        limit = asyncio.Semaphore(32)

        async def one(index: int) -> None:
            node = SetNodeRequest(
                node=f"big-{index:04d}", pod="big", cpu_map={str(c): 100 for c in range(8)}, memory=32 * GIB
            )
            async with limit:
                await request(nc, allocator_operation("set-node"), node, OperationReply, 30)

        await asyncio.gather(*(one(index) for index in range(1, 1001)))

    stack.bus(add_nodes)
    browser.set_window_size(390, 844)
    browser.find_element("css selector", 'a[data-page="cluster"]').click()
    wait_until(browser, lambda: "of 1002" in browser.find_element("css selector", ".pager").text, "1002 nodes paged")
    assert len(browser.find_elements("css selector", "article.node")) == 24
    assert browser.execute_script("return document.documentElement.scrollWidth <= window.innerWidth")
    # a condition published on the bus for a shown node is drawn on its card at once (no agent, no eviction service
    # writes conditions for these nodes, so nothing else changes it meanwhile)
    from eru.bus import new_envelope, publish
    from eru.domain import NodeCondition

    condition = NodeCondition(
        node="big-0001",
        time=time.time(),
        state="suppressed",
        forbid_schedule_cpu=True,
        batch_cpu_allowed=1.5,
        batch_cpu_capacity=2.0,
        batch_memory_capacity=4 * GIB,
        cpu_percent=81.0,
        watermarks={"cpu_forbid": 60, "cpu_suppress": 70, "cpu_evict": 80, "memory_forbid": 60, "memory_evict": 70},
    )

    async def send_condition(nc: Any) -> None:
        envelope = new_envelope("eru.node.condition", "eviction/test")
        await publish(nc.jetstream(), "eru.node.big-0001.condition", condition, envelope)

    stack.bus(send_condition)
    card = 'article.node[data-node="big-0001"]'
    wait_until(browser, lambda: "suppressed" in browser.find_element("css selector", card).text, "the suppressed badge")
    text = browser.find_element("css selector", card).text
    assert "batch suppressed to 1.5 cores" in text
    assert "evict 80%" in text
    assert "81% used" in text  # the condition's usage until a metrics sample arrives
    screenshot(browser, "07-cluster-phone", full_page=False)
    box = browser.find_element("css selector", 'input[type="search"]')
    started = time.monotonic()
    box.send_keys("big-0999")
    wait_until(browser, lambda: len(browser.find_elements("css selector", "article.node")) == 1, "the filtered node")
    filtered_in = time.monotonic() - started
    assert browser.find_element("css selector", "article.node").get_attribute("data-node") == "big-0999"
    assert filtered_in < 10, f"filtering 1,002 nodes took {filtered_in:.1f} s"
    box.clear()
    browser.find_element("css selector", 'a[data-page="deploys"]').click()
    wait_until(browser, lambda: browser.find_elements("css selector", "tr[data-deploy]"), "deploys at phone width")
    screenshot(browser, "08-deploys-phone", full_page=False)
    assert severe_logs(browser) == []
    browser.set_window_size(1280, 900)


def test_bad_api_input_is_a_clear_error_and_the_console_keeps_serving(stack: Stack) -> None:
    import http.cookiejar

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(stack.login_url(), timeout=10) as response:
        assert response.status == 200  # followed the redirect to the app with the session cookie
    base = stack.console_url.rstrip("/")

    def answer(path: str, method: str = "GET") -> tuple[int, dict[str, Any]]:
        try:
            with opener.open(urllib.request.Request(base + path, method=method), timeout=20) as response:
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as error:
            return int(error.code), json.loads(error.read())

    status, body = answer("/api/nodes?limit=lots")
    assert status == 400
    assert body["error"]["message"] == "limit: expected a whole number from 1 to 200, got 'lots'"
    status, body = answer("/api/nodes?offset=-1")
    assert status == 400
    assert "offset" in body["error"]["message"]
    status, body = answer("/api/deploys/no-such-deploy")
    assert status == 404
    assert "unknown deploy 'no-such-deploy'" in body["error"]["message"]
    status, body = answer("/api/replay/no-such-decision", "POST")
    assert status == 404
    assert "unknown decision 'no-such-decision'" in body["error"]["message"]
    status, body = answer("/api/deploys?limit=1")
    assert status == 200
    assert len(body["deploys"]) == 1  # still serving, and the limit holds
    _deploy(stack, 1)
    _deploy(stack, 1)
    status, newest = answer("/api/deploys?limit=1")
    assert newest["next_cursor"] is not None
    status, older = answer("/api/deploys?limit=1&cursor=" + urllib.parse.quote(newest["next_cursor"]))
    assert status == 200
    assert older["deploys"][0]["created_at"] <= newest["deploys"][0]["created_at"]
    assert older["deploys"][0]["id"] != newest["deploys"][0]["id"]
    status, body = answer("/api/deploys?cursor=forged")
    assert status == 400
    assert "cursor" in body["error"]["message"]
