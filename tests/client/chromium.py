"""Render a page in headless Chromium (Debian's `chromium`): a screenshot and the
console messages it logged."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium")

needs_chromium = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Debian's chromium is not installed (apt-get install chromium; `make test` "
    "installs it where apt-get runs as root)",
)


def screenshot(page: Path, png: Path, profile: Path) -> list[str]:
    """Screenshot `page` into `png`; the console lines Chromium logged.

    The page renders with no network: every background service is off, and a
    page that tried to fetch anything would log the refusal of its own CSP.
    """
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1280,2400",
            f"--screenshot={png}",
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    # Every console message (log, warning, error, CSP refusal) is logged as CONSOLE.
    return [line for line in done.stderr.splitlines() if ":CONSOLE" in line]


def busy_pixels(png: Path) -> int:
    """How many pixels are not the page's white background."""
    from PIL import Image

    with Image.open(png) as img:
        rgb = img.convert("RGB")
        return sum(n for n, colour in rgb.getcolors(1 << 24) or [] if colour != (255, 255, 255))
