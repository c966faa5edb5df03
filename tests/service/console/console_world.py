"""A demo-seeded app for the console's tests, and logging in to it as a person would."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

DEMO_ADMIN = "gpa_console-test-admin-0123456789"


def demo_tokens(data_dir: Path) -> dict[str, str]:
    """``{user: token}`` of the demo's users (``demo-tokens.json``), and ``admin``."""
    doc = json.loads((data_dir / "demo-tokens.json").read_text())
    tokens = {u["user"]: u["token"] for u in doc["users"]}
    tokens["admin"] = DEMO_ADMIN
    return tokens


def csrf_of(html: str) -> str:
    match = re.search(r'<meta name="csrf-token" content="([^"]+)">', html)
    assert match, "the page carries no CSRF token"
    return match.group(1)


def log_in(client: httpx.Client, token: str) -> str:
    """Log ``client`` in with ``token``; the CSRF token of its session."""
    client.cookies.clear()
    r = client.post("/login", data={"token": token, "next": "/"}, follow_redirects=True)
    assert r.status_code == 200, r.text[-2000:]
    return csrf_of(r.text)
