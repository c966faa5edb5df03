"""First start, token storage, and authentication failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import select

from gpuaas.service.app import create_app
from gpuaas.service.auth import hash_token
from gpuaas.store.db import Database
from gpuaas.store.tables import Token


def test_first_start_prints_a_token_once_and_stores_only_its_hash(
    sqlite_url: str, tmp_path: Path, settings_for: Any
) -> None:
    shown: list[str] = []
    settings = settings_for(sqlite_url, tmp_path, admin_token=None)
    with TestClient(create_app(settings, on_admin_token=shown.append)) as client:
        assert len(shown) == 1 and shown[0].startswith("gpa_")
        ok = client.get("/v1/whoami", headers={"Authorization": f"Bearer {shown[0]}"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["platformRole"] == "provider-admin"
    with TestClient(create_app(settings, on_admin_token=shown.append)):
        pass
    assert len(shown) == 1  # never again
    db = Database(sqlite_url)
    with db.sessions() as s:
        stored = list(s.scalars(select(Token)))
    db.dispose()
    assert [t.token_hash for t in stored] == [hash_token(shown[0])]
    assert all(shown[0] not in (t.prefix + t.token_hash) or len(t.prefix) < 16 for t in stored)
    assert Path(sqlite_url.removeprefix("sqlite:///")).read_bytes().find(shown[0].encode()) == -1


def test_admin_token_from_the_environment(
    sqlite_url: str, tmp_path: Path, settings_for: Any
) -> None:
    shown: list[str] = []
    token = "automation-token-0123456789"
    settings = settings_for(sqlite_url, tmp_path, admin_token=token)
    with TestClient(create_app(settings, on_admin_token=shown.append)) as client:
        assert shown == [token]
        r = client.get("/v1/whoami", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200


def test_missing_and_wrong_tokens_are_401_problems(
    sqlite_url: str, tmp_path: Path, settings_for: Any
) -> None:
    with TestClient(create_app(settings_for(sqlite_url, tmp_path))) as client:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}):
            r = client.get("/v1/whoami", headers=headers)
            assert r.status_code == 401
            assert r.headers["content-type"].startswith("application/problem+json")
            assert r.headers["www-authenticate"] == "Bearer"
            assert r.json()["status"] == 401


def test_health_and_openapi_need_no_token(
    sqlite_url: str, tmp_path: Path, settings_for: Any
) -> None:
    with TestClient(create_app(settings_for(sqlite_url, tmp_path))) as client:
        health = client.get("/healthz")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert client.get("/openapi.json").json()["info"]["title"] == "gpuaas"
        assert client.get("/docs").status_code == 200


def test_oversized_bodies_are_refused_with_413(
    sqlite_url: str, tmp_path: Path, settings_for: Any
) -> None:
    settings = settings_for(sqlite_url, tmp_path, max_body_bytes=1000)
    with TestClient(create_app(settings)) as client:
        r = client.post("/v1/tenants", content=b"x" * 5000, headers={"content-type": "text/plain"})
        assert r.status_code == 413
        assert "1000 bytes" in r.json()["detail"]
