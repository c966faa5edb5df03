"""Fixtures for the service: a fresh database per test, on SQLite and on a real PostgreSQL.

PostgreSQL 15 is started once per test session as the ``postgres`` user (it refuses root), as
``../shared/recipes/postgres-local.md`` describes, and stopped at the end; every test gets a
database of its own. Tests that take ``db_url`` run on both databases.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings

ADMIN_TOKEN = "gpa_test-admin-token-0123456789"
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(*args: str) -> list[str]:
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return list(args)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server for the session: yields its base URL (no database name)."""
    initdb = PG_BIN / "initdb"
    if not initdb.exists():
        pytest.skip(f"PostgreSQL 15 is not installed ({initdb} is missing)")
    root = Path(tempfile.mkdtemp(prefix="gpuaas-pg-"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    data = root / "data"
    port = _free_port()
    subprocess.run(
        _as_postgres(
            str(initdb), "-D", str(data), "-U", "postgres", "--auth=trust",
            "--encoding=UTF8", "--locale=C.UTF-8",
        ),
        check=True, capture_output=True,
    )  # fmt: skip
    options = (
        f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off "
        "-c synchronous_commit=off -c max_connections=300"
    )
    subprocess.run(
        _as_postgres(
            str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w",
            "-o", options, "start",
        ),
        check=True, capture_output=True,
    )  # fmt: skip
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        subprocess.run(
            _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"),
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


def _pg_admin(base: str, sql: str) -> None:
    import psycopg

    url = base.replace("postgresql+psycopg://", "postgresql://") + "/postgres"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, or a new database on the session's PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gpuaas.db'}"
        return
    base = request.getfixturevalue("postgres_server")
    name = f"t_{uuid.uuid4().hex[:12]}"
    _pg_admin(base, f"CREATE DATABASE {name}")
    try:
        yield f"{base}/{name}"
    finally:
        _pg_admin(base, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'gpuaas.db'}"


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
