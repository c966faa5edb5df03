"""Debian's Chromium as the benchmark and the browser tests run it headless: one binary and
one set of launch arguments, so a flag added for one run (a sandbox the container lacks, no
GPU, no background traffic that would skew a timing) holds for all of them."""

from __future__ import annotations

import shutil

#: no sandbox (containers lack the user namespaces it needs), no GPU, no QUIC, and none of
#: the first-run, update, sync or background requests a fresh profile would make
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def chromium_binary() -> str:
    """Debian's Chromium (``apt-get install chromium``; never ``playwright install``): the
    one on PATH, else where Debian puts it (which may not exist: callers check)."""
    return shutil.which("chromium") or "/usr/bin/chromium"
