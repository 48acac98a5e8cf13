"""A real browser for the console tests: Debian's headless chromium driven by selenium through Debian's
chromedriver, with a fresh profile and no traffic of its own (docs/console.md)."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "console"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--metrics-recording-only",
    "--no-default-browser-check",
)


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    for path, package in ((CHROMIUM, "chromium"), (CHROMEDRIVER, "chromium-driver")):
        if not Path(path).exists():
            return f"{path} is missing: install Debian's {package} (scripts/install-system-packages.sh does, as root)"
    try:
        import selenium  # noqa: F401  (only checking that it is installed)
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@contextmanager
def chromium(width: int = 1280, height: int = 900) -> Iterator[Any]:
    """A headless chromium with a fresh profile that keeps its console log; quit and removed afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="eru-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_until(driver: Any, condition: Callable[[], Any], what: str, seconds: float = 30.0) -> Any:
    """Poll `condition()` until it returns something truthy; fail naming `what` with a screenshot."""
    deadline = time.monotonic() + seconds
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception as error:  # a stale element between two renders: look again
            last_error = error
            value = None
        if value:
            return value
        time.sleep(0.1)
    screenshot(driver, f"FAILED-{what.replace(' ', '-')[:60]}")
    raise AssertionError(f"timed out after {seconds} s waiting for {what} (last error: {last_error})")


def screenshot(driver: Any, name: str, *, full_page: bool = True) -> Path:
    """Save the page as `test-artifacts/console/<name>.png` (the whole page when `full_page`, through the DevTools
    protocol, so the window keeps its size and the page does not re-lay itself out)."""
    import base64

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    if full_page:
        size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
        width = max(size["width"], driver.execute_script("return window.innerWidth"))
        clip = {"x": 0, "y": 0, "width": width, "height": size["height"], "scale": 1}
        shot = driver.execute_cdp_cmd(
            "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
        )
        path.write_bytes(base64.b64decode(shot["data"]))
    else:
        driver.save_screenshot(str(path))
    return path


def severe_logs(driver: Any) -> list[dict[str, Any]]:
    """Browser console entries of level SEVERE since the last call (reading empties chromium's buffer)."""
    return [entry for entry in driver.get_log("browser") if entry.get("level") == "SEVERE"]
