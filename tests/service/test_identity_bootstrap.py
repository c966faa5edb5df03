"""The first start's admin token is shown only once a start has succeeded: a start that fails
after creating the admin shows nothing, and the next start shows a new token (the unseen one is
revoked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from gpuaas.model.errors import GpuaasError
from gpuaas.service.app import create_app
from gpuaas.store.db import Database
from gpuaas.store.tables import Token


def live_tokens(db_url: str) -> list[Token]:
    db = Database(db_url)
    with db.sessions() as s:
        rows = list(s.scalars(select(Token).where(Token.revoked.is_(False))))
    db.dispose()
    return rows


def failing_start(settings: Any, shown: list[str]) -> None:
    app = create_app(settings, on_admin_token=shown.append)
    with pytest.raises(GpuaasError), TestClient(app):  # the fleet file is refused
        pass


@pytest.mark.parametrize("given", [None, "gpa_from-the-environment-0123"])
def test_a_failed_first_start_shows_no_token_and_the_next_shows_one(
    given: str | None, db_url: str, tmp_path: Path, settings_for: Any
) -> None:
    bad = tmp_path / "fleet.yaml"
    bad.write_text("kind: NotAFleet\n", encoding="utf-8")
    shown: list[str] = []
    failing_start(settings_for(db_url, tmp_path, admin_token=given, fleet=bad), shown)
    failing_start(settings_for(db_url, tmp_path, admin_token=given, fleet=bad), shown)
    assert shown == []
    good = settings_for(db_url, tmp_path, admin_token=given)
    with TestClient(create_app(good, on_admin_token=shown.append)) as client:
        assert len(shown) == 1 and (given is None or shown == [given])
        who = client.get("/v1/whoami", headers={"Authorization": f"Bearer {shown[0]}"})
        assert who.status_code == 200 and who.json()["platformRole"] == "provider-admin"
    with TestClient(create_app(good, on_admin_token=shown.append)):
        pass
    assert len(shown) == 1  # never again
    assert [t.name for t in live_tokens(db_url)] == ["bootstrap"]  # the unseen ones revoked
