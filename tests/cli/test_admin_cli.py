"""``gpuaas admin reset-token``: with the database in hand, a new provider-admin token; the old
ones are refused by a server that is running, on their first request once the server's
principal cache (``service/principal_cache.py``, at most ``TTL_SECONDS``) has let them go: the
reset is written by another process, which the cache cannot hear."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from gpuaas.cli.main import app
from gpuaas.service.app import create_app
from gpuaas.service.principal_cache import TTL_SECONDS
from gpuaas.service.settings import Settings

runner = CliRunner()


def reset(*args: str) -> str:
    result = runner.invoke(app, ["admin", "reset-token", *args])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "provider admin token" in x)
    return line.rsplit(" ", 1)[1]


def whoami(client: TestClient, token: str) -> int:
    return client.get("/v1/whoami", headers={"Authorization": f"Bearer {token}"}).status_code


def refused_within_the_bound(client: TestClient, token: str) -> bool:
    """Whether ``token`` is refused by the end of the cache's bound (and a little slack)."""
    deadline = time.monotonic() + TTL_SECONDS + 0.5
    while whoami(client, token) != 401:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_reset_token_replaces_the_admin_tokens_while_the_server_runs(
    db_url: str, tmp_path: Path
) -> None:
    shown: list[str] = []
    settings = Settings(db_url=db_url, data_dir=tmp_path, reconcile=False)
    with TestClient(create_app(settings, on_admin_token=shown.append)) as client:
        first = shown[0]
        second = client.post(
            "/v1/tokens", json={"name": "ci"}, headers={"Authorization": f"Bearer {first}"}
        ).json()["token"]
        new = reset("--db", db_url)
        assert new.startswith("gpa_") and new not in (first, second)
        assert refused_within_the_bound(client, first)
        assert refused_within_the_bound(client, second)
        assert whoami(client, new) == 200
        assert reset("--db", db_url) != new
        assert refused_within_the_bound(client, new)
    with TestClient(create_app(settings, on_admin_token=shown.append)):
        pass
    assert shown == [first]  # a later start shows nothing


def test_reset_token_on_a_data_dir_never_started_and_for_a_disabled_admin(tmp_path: Path) -> None:
    token = reset("--data-dir", str(tmp_path))
    settings = Settings(db_url=None, data_dir=tmp_path, reconcile=False)
    shown: list[str] = []
    with TestClient(create_app(settings, on_admin_token=shown.append)) as client:
        assert shown == []  # the reset counts as the first start's token
        who = client.get("/v1/whoami", headers={"Authorization": f"Bearer {token}"}).json()
        assert who["user"] == "admin" and who["platformRole"] == "provider-admin"
        headers = {"Authorization": f"Bearer {token}"}
        client.post(
            "/v1/users", json={"name": "ops", "platformRole": "provider-admin"}, headers=headers
        )
        assert client.patch("/v1/users/admin", json={"disabled": True}, headers=headers).is_success
        assert whoami(client, token) == 401
        ops = reset("--data-dir", str(tmp_path), "--user", "ops")
        again = reset("--data-dir", str(tmp_path))  # re-enables admin
        assert whoami(client, again) == 200 and whoami(client, ops) == 200


def test_reset_token_refuses_a_bad_user_name(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["admin", "reset-token", "--data-dir", str(tmp_path), "--user", "Bad Name"]
    )
    assert result.exit_code == 2
    assert "--user" in result.output and "not a valid user name" in result.output
