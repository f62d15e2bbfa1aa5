"""Driving the web console in a real browser: Debian's chromium (/usr/bin/chromium, installed by
`make browser`) through Playwright, pointed at that executable — no browser download.

Screenshots go to `.lestrade/test-artifacts/console/` (or $LESTRADE_TEST_ARTIFACTS/console)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, Page, expect, sync_playwright

__all__ = ["CHROMIUM", "browser", "signed_in", "ARTIFACTS", "shot"]

CHROMIUM = Path(os.environ.get("LESTRADE_CHROMIUM", "/usr/bin/chromium"))
ARTIFACTS = (
    Path(
        os.environ.get("LESTRADE_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / ".lestrade" / "test-artifacts")
    )
    / "console"
)
TIMEOUT_MS = 60_000
"""How long an expectation waits for the page (a loaded 2-core machine runs the operator too)."""
expect.set_options(timeout=TIMEOUT_MS)


@contextmanager
def browser() -> Iterator[Browser]:
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: run `make browser` (apt-get install chromium)"
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def signed_in(chromium: Browser, base: str, token: str, errors: list[str]) -> Page:
    """A new tab (its own sessionStorage) signed in with `token` through the sign-in form."""
    page = chromium.new_context(viewport={"width": 1200, "height": 900}).new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(base + "/")
    page.fill("#token", token)
    page.click("#signin button")
    page.wait_for_selector("#who:has-text('signed in as')")
    return page


def shot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
