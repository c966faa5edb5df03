"""The identity client commands for invitations and token lists, end to end: the real CLI app
talking to the real API app in process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import gpuaas.cli.client as cli_client
from gpuaas.cli.main import app
from gpuaas.client import Client
from gpuaas.service.app import create_app
from gpuaas.service.settings import Settings

ADMIN = "gpa_cli-admin-token-0123456789abcdef"
URL = "http://testserver"
runner = CliRunner()


@pytest.fixture
def http(sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    settings = Settings(db_url=sqlite_url, data_dir=tmp_path, reconcile=False, admin_token=ADMIN)
    monkeypatch.setenv("GPUAAS_CONFIG", str(tmp_path / "config" / "config.json"))
    for name in ("GPUAAS_URL", "GPUAAS_TOKEN", "GPUAAS_TENANT"):
        monkeypatch.delenv(name, raising=False)
    with TestClient(create_app(settings), base_url=URL) as client:
        monkeypatch.setattr(
            cli_client, "make_client", lambda url, token: Client.from_httpx(client, token)
        )
        yield client


def run(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result.stdout


def ok_json(*args: str) -> Any:
    return json.loads(run(*args, "--json"))


def login(token: str) -> None:
    run("login", URL, token)


def test_invitations_from_the_command_line(http: TestClient) -> None:
    login(ADMIN)
    ok_json("tenants", "create", "acme")
    ok_json("tenants", "create", "globex")
    ok_json("members", "set", "gina", "tenant-admin", "--tenant", "globex")
    gina = ok_json("members", "token", "gina", "--name", "g", "--tenant", "globex")["token"]
    ok_json("members", "set", "alice", "tenant-user", "--tenant", "acme")
    alice = ok_json("tokens", "create", "own", "--user", "alice")
    assert alice["tenant"] is None

    login(gina)
    out = run("members", "set", "alice", "viewer", "--tenant", "globex")
    assert "invited" in out and "gpuaas invitations accept globex" in out
    listed = ok_json("invitations", "list", "--tenant", "globex")
    assert [(i["user"], i["role"]) for i in listed["items"]] == [("alice", "viewer")]

    login(alice["token"])
    mine = ok_json("invitations", "list")
    assert [i["tenant"] for i in mine["items"]] == ["globex"]
    assert ok_json("invitations", "accept", "globex")["role"] == "viewer"
    assert ok_json("invitations", "list")["items"] == []

    login(gina)
    run("members", "set", "bob", "viewer", "--tenant", "globex")  # new: a member at once
    login(ADMIN)
    ok_json("users", "create", "carol")
    login(gina)
    run("members", "set", "carol", "viewer", "--tenant", "globex")
    assert "removed" in run("invitations", "decline", "globex", "--user", "carol")
    assert ok_json("invitations", "list", "--tenant", "globex")["items"] == []


def test_token_lists_and_revocation_from_the_command_line(http: TestClient) -> None:
    login(ADMIN)
    ok_json("tenants", "create", "acme")
    ok_json("members", "set", "ann", "tenant-admin", "--tenant", "acme")
    ok_json("members", "set", "bob", "tenant-user", "--tenant", "acme")
    ann = ok_json("members", "token", "ann", "--name", "a", "--tenant", "acme")["token"]
    bob = ok_json("members", "token", "bob", "--name", "ci", "--tenant", "acme")
    assert bob["tenant"] == "acme"
    by_user = ok_json("tokens", "list", "--user", "bob")["items"]
    assert [t["id"] for t in by_user] == [bob["id"]]
    table = run("tokens", "list", "--user", "bob")
    assert "TENANT" in table and "acme" in table
    everyone = ok_json("tokens", "list", "--everyone")["items"]
    assert {t["user"] for t in everyone} == {"admin", "ann", "bob"}

    login(ann)
    in_tenant = ok_json("tokens", "list", "--tenant", "acme")["items"]
    assert {t["user"] for t in in_tenant} == {"ann", "bob"}
    run("tokens", "revoke", str(bob["id"]), "--tenant", "acme")
    after = ok_json("tokens", "list", "--tenant", "acme")["items"]
    assert bob["id"] not in {t["id"] for t in after}
    failed = runner.invoke(app, ["tokens", "list", "--user", "bob", "--tenant", "acme"])
    assert failed.exit_code != 0 and "not several" in failed.output
    short = ok_json("tokens", "create", "short", "--expires-in", "60")
    login(short["token"])
    refused = runner.invoke(app, ["tokens", "create", "longer", "--expires-in", "3600"])
    assert refused.exit_code == 1 and "expiresIn" in refused.output
