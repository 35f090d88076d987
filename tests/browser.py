"""Debian's Chromium driven by Playwright, for the tests of the pages people look at
(the dashboard, the gateway's page)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from playwright.sync_api import Page, sync_playwright

# headless, and no background connections: this machine's network is closed to them
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
# how long a page may take to show what a test waits for
PAGE_TIMEOUT_MS = 30_000


@contextmanager
def browser_page(width: int = 1280, height: int = 2000) -> Iterator[Page]:
    """A page of Debian's chromium (the test skips, saying why, when it is missing)."""
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("Debian's chromium is not installed (`make install` installs it)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(PAGE_TIMEOUT_MS)
            yield page
        finally:
            browser.close()
