"""Headless Chromium (Playwright for Python, Debian's /usr/bin/chromium) against the Airflow UI.

No browser download: Playwright drives the system Chromium (``apt-get install -y chromium``).

Usage::

    from dev.browser import chromium, login, capture

    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        login(page, af.base_url, af.username, af.password)
        shot = capture(page, f"{af.base_url}/tsb/ui/lineage", "#tsb-lineage", OUT_DIR, "lineage")

Plugin pages embedded by the Airflow UI (``external_views`` with a ``url_route``) live in an
iframe; use :func:`frame_with_selector` to reach their content.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import Browser, Frame, Page, sync_playwright

CHROMIUM_ARGS: tuple[str, ...] = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_OUTPUT = REPO_ROOT / "test-output"
DEFAULT_TIMEOUT_MS = 30_000


def chromium_path() -> str | None:
    """The system Chromium, or None when it is not installed."""
    for candidate in (os.environ.get("TSB_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


@contextmanager
def chromium(timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Iterator[Browser]:
    """A headless system-Chromium browser; closed on exit."""
    path = chromium_path()
    if path is None:
        raise RuntimeError("Chromium not found: apt-get install -y chromium (or set TSB_CHROMIUM)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, headless=True, args=list(CHROMIUM_ARGS))
        try:
            yield browser
        finally:
            browser.close()


def new_page(browser: Browser, width: int = 1400, height: int = 900) -> Page:
    page = browser.new_page(viewport={"width": width, "height": height})
    page.set_default_timeout(DEFAULT_TIMEOUT_MS)
    return page


def login(page: Page, base_url: str, username: str, password: str, next_path: str = "/") -> None:
    """Log in through the Airflow UI's login form (SimpleAuthManager), like a user.

    Sets the ``_token`` session cookie in the page's browser context; lands on ``next_path``.
    """
    base = base_url.rstrip("/")
    page.goto(f"{base}/auth/login?next={quote(base + next_path, safe='')}")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_function("() => document.cookie.includes('_token=')", timeout=DEFAULT_TIMEOUT_MS)
    page.wait_for_url(re.compile(r"^(?!.*/auth/login).*$"), timeout=DEFAULT_TIMEOUT_MS)


def login_with_token(page: Page, base_url: str, token: str) -> None:
    """Shortcut: install an Airflow JWT (from ``POST /auth/token``) as the ``_token`` cookie."""
    page.context.add_cookies([{"name": "_token", "value": token, "url": base_url.rstrip("/") + "/"}])


def screenshot(page: Page, out_dir: Path, name: str, full_page: bool = True) -> Path:
    """Save ``<out_dir>/<name>.png``; returns the path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


def capture(
    page: Page,
    url: str,
    selector: str,
    out_dir: Path,
    name: str,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
) -> Path:
    """Open ``url``, wait until ``selector`` is visible (in the page or any iframe), screenshot it."""
    page.goto(url)
    frame_with_selector(page, selector, timeout_ms)
    return screenshot(page, out_dir, name)


def frame_with_selector(page: Page, selector: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> Frame:
    """The page's frame (main frame or an iframe, e.g. a plugin external view) showing ``selector``."""
    deadline_ms = timeout_ms
    step_ms = 250
    while True:
        for frame in page.frames:
            try:
                if frame.locator(selector).first.is_visible():
                    return frame
            except Exception:  # noqa: BLE001 - frames can detach while we look
                continue
        if deadline_ms <= 0:
            raise TimeoutError(f"{selector!r} not visible in {page.url} (frames: {[f.url for f in page.frames]})")
        page.wait_for_timeout(step_ms)
        deadline_ms -= step_ms
