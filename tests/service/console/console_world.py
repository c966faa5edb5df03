"""A demo-seeded app for the console's tests, and logging in to it as a person would."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings

DEMO_ADMIN = "gpa_console-test-admin-0123456789"
World = tuple[TestClient, dict[str, str]]


def demo_settings(data: Path) -> Settings:
    """The demo on SQLite in ``data``: no reconciler (the tests drive what changes), the
    demo's jobs submitted hourly (so none arrive during a test)."""
    return Settings(
        db_url=f"sqlite:///{data}/gpuaas.db",
        data_dir=data,
        demo=True,
        reconcile=False,
        admin_token=DEMO_ADMIN,
        demo_job_interval=3600,
    )


@contextmanager
def demo_world(data: Path) -> Iterator[World]:
    """The demo-seeded app (:func:`demo_settings`) as a TestClient, and the demo's tokens."""
    with TestClient(create_app(demo_settings(data))) as client:
        yield client, demo_tokens(data)


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
