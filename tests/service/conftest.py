"""Fixtures for the service: the app on a fresh database (``db_url``, ``sqlite_url`` and the
PostgreSQL server are in ``tests/conftest.py``), spoken to as one token at a time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database

ADMIN_TOKEN = "gpa_test-admin-token-0123456789"


class Api:
    """A test client that speaks as one token at a time: ``api.as_(token).get(...)``."""

    def __init__(self, client: TestClient, token: str) -> None:
        self.client = client
        self.token = token

    def as_(self, token: str | None) -> Api:
        return Api(self.client, token or "")

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", None) or {})
        if self.token:
            headers.setdefault("Authorization", f"Bearer {self.token}")
        return self.client.request(method, url, headers=headers, **kwargs)

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", url, **kwargs)

    def patch(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)


def make_settings(db_url: str, tmp_path: Path, **overrides: Any) -> Settings:
    fields: dict[str, Any] = {
        "db_url": db_url,
        "data_dir": tmp_path,
        "reconcile": False,
        "admin_token": ADMIN_TOKEN,
    }
    fields.update(overrides)
    return Settings(**fields)


@pytest.fixture
def api(db_url: str, tmp_path: Path) -> Iterator[Api]:
    """The app on a fresh database (SQLite and PostgreSQL), as the provider admin; no
    reconciler runs (tests that need one start it themselves)."""
    app = create_app(make_settings(db_url, tmp_path))
    with TestClient(app) as client:
        yield Api(client, ADMIN_TOKEN)


@pytest.fixture
def sqlite_api(sqlite_url: str, tmp_path: Path) -> Iterator[Api]:
    """As ``api``, on SQLite only (for tests whose subject is not the database)."""
    app = create_app(make_settings(sqlite_url, tmp_path))
    with TestClient(app) as client:
        yield Api(client, ADMIN_TOKEN)


@pytest.fixture
def settings_for() -> Any:
    """``settings_for(db_url, tmp_path, **overrides)``: test settings (no reconciler, the test
    admin token) for tests that create their own app."""
    return make_settings


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """A handle on the test's database (SQLite or PostgreSQL), disposed after the test."""
    database = Database(db_url)
    yield database
    database.dispose()


@pytest.fixture
def servers() -> Iterator[list[Any]]:
    """Servers a test starts (``serve_process.Server``), stopped at its end whatever happened."""
    started: list[Any] = []
    yield started
    for server in started:
        server.stop()
