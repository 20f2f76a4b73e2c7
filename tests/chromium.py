"""Headless Chromium for the tests that open a page as a browser does: its DOM after parsing, a screenshot.

`make test` installs Debian's ``chromium`` when ``/usr/bin/chromium`` is missing; a test that needs it
fails, rather than skips, without it.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

DEBIAN_CHROMIUM = Path("/usr/bin/chromium")
#: Headless, and no connection of Chromium's own: this machine's closed network refuses them, and a
#: test page must load nothing anyway.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
TIMEOUT = 90


def chromium() -> str:
    """The Chromium executable; the calling test fails without one."""
    found = str(DEBIAN_CHROMIUM) if DEBIAN_CHROMIUM.exists() else shutil.which("chromium")
    if found is None:
        pytest.fail(f"Chromium is missing ({DEBIAN_CHROMIUM}): run `make test`, which installs Debian's chromium")
    return found


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        proc = subprocess.run([chromium(), *FLAGS, f"--user-data-dir={profile}", *args],
                              capture_output=True, text=True, timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def dump_dom(page: Path) -> str:
    """The page's DOM as Chromium serialises it once the page has loaded."""
    return _run("--dump-dom", page.resolve().as_uri()).stdout


def screenshot(page: Path, png: Path, width: int = 1280, height: int = 2400) -> Path:
    """A PNG of the page's top *height* pixels in a *width*-pixel wide window."""
    _run(f"--screenshot={png}", f"--window-size={width},{height}", "--hide-scrollbars", page.resolve().as_uri())
    assert png.exists(), f"Chromium wrote no screenshot of {page}"
    return png
