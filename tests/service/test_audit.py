"""The audit log: an entry for every write route (walked from the OpenAPI document, as the RBAC
matrix walks it), the caller and the outcome, digests that chain an object's changes, who may
read it, JSON-lines export and an HTTP sink."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient

from conftest import ADMIN_TOKEN, Api
from gpuaas.service.app import create_app

WRITES = ("post", "put", "patch", "delete")


def _audit(api: Api, url: str = "/v1/audit?limit=1000") -> list[dict[str, Any]]:
    answer = api.as_(ADMIN_TOKEN).get(url)
    assert answer.status_code == 200, answer.text
    return answer.json()["items"]


def test_every_write_route_leaves_an_entry(sqlite_api: Api) -> None:
    doc = sqlite_api.get("/openapi.json").json()
    seen: dict[tuple[str, str], int] = {}
    for path, ops in doc["paths"].items():
        for method in ops:
            if method not in WRITES or not path.startswith("/v1/"):
                continue
            url = re.sub(r"\{[^}]+\}", "nothing-here", path)
            kwargs: dict[str, Any] = {"json": {}} if "requestBody" in ops[method] else {}
            seen[(method.upper(), path)] = sqlite_api.request(
                method.upper(), url, **kwargs
            ).status_code
    assert len(seen) > 40
    entries = _audit(sqlite_api)
    logged = {(e["method"], e["route"]): e for e in entries}
    for (method, route), status in seen.items():
        entry = logged.get((method, route))
        assert entry is not None, f"{method} {route} left no audit entry"
        assert entry["status"] == status and entry["user"] == "admin", entry
        assert entry["outcome"] == ("ok" if status < 400 else "refused"), entry


@pytest.mark.parametrize("read_between", [False, True], ids=["one-batch", "stored-lookup"])
def test_entries_chain_an_objects_changes_and_say_who(api: Api, read_between: bool) -> None:
    """On both databases; with ``read_between`` the create is stored (a read flushes the log)
    before the patch, so the patch's ``before`` comes from the stored entries' look-up."""
    made = api.post("/v1/tenants", json={"name": "acme", "displayName": "Acme"})
    assert made.status_code == 201
    if read_between:
        _audit(api)
    changed = api.patch("/v1/tenants/acme", json={"displayName": "Acme Corp"})
    assert changed.status_code == 200
    assert api.as_(None).patch("/v1/tenants/acme", json={}).status_code == 401
    mine = [e for e in _audit(api) if e["object"] == "/v1/tenants/acme"]
    create, patch, anonymous = mine
    assert create["method"] == "POST" and create["before_digest"] is None
    assert create["after_digest"] == hashlib.sha256(made.content).hexdigest()
    assert patch["before_digest"] == create["after_digest"]
    assert patch["after_digest"] == hashlib.sha256(changed.content).hexdigest()
    assert patch["token_id"] is not None and patch["tenant"] == "acme"
    assert anonymous["user"] == "" and anonymous["outcome"] == "refused"
    assert anonymous["status"] == 401 and anonymous["after_digest"] is None
    assert anonymous["before_digest"] == patch["after_digest"]  # the object as it still is


def test_a_tenant_admin_reads_its_own_tenant_only(sqlite_api: Api) -> None:
    tokens = {}
    for tenant, user in (("acme", "ann"), ("globex", "gil")):
        assert sqlite_api.post("/v1/tenants", json={"name": tenant}).status_code == 201
        member = {"role": "tenant-admin"}
        assert (
            sqlite_api.put(f"/v1/tenants/{tenant}/members/{user}", json=member).status_code == 200
        )
        tokens[user] = sqlite_api.post(f"/v1/users/{user}/tokens", json={"name": "t"}).json()[
            "token"
        ]
    ann, gil = sqlite_api.as_(tokens["ann"]), sqlite_api.as_(tokens["gil"])
    assert ann.patch("/v1/tenants/acme", json={"displayName": "A"}).status_code in (200, 403)
    own = ann.get("/v1/tenants/acme/audit")
    assert own.status_code == 200
    assert own.json()["items"] and {e["tenant"] for e in own.json()["items"]} == {"acme"}
    assert ann.get("/v1/tenants/globex/audit").status_code == 404
    assert gil.get("/v1/audit").status_code == 403
    lines = ann.get("/v1/tenants/acme/audit?format=jsonl")
    assert lines.headers["content-type"].startswith("application/x-ndjson")
    parsed = [json.loads(line) for line in lines.text.splitlines()]
    assert parsed == own.json()["items"]


class _Receiver(BaseHTTPRequestHandler):
    lines: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"])).decode()
        _Receiver.lines.extend(body.splitlines())
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    _Receiver.lines = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/audit"
    server.shutdown()


def test_entries_are_shipped_to_the_http_sink(
    sqlite_url: str, tmp_path: Path, settings_for: Any, receiver: str
) -> None:
    settings = settings_for(sqlite_url, tmp_path, audit_http=receiver)
    with TestClient(create_app(settings)) as client:
        api = Api(client, ADMIN_TOKEN)
        assert api.post("/v1/tenants", json={"name": "acme"}).status_code == 201
        client.app.state.audit.flush()  # type: ignore[attr-defined]
    shipped = [json.loads(line) for line in _Receiver.lines]
    assert [(e["method"], e["object"]) for e in shipped] == [("POST", "/v1/tenants/acme")]


def test_a_nul_in_the_path_is_stored_escaped_on_both_databases(api: Api) -> None:
    """PostgreSQL's text refuses NUL: a path that decodes to one is stored escaped, and the
    entries after it are stored too (one refused entry never blocks the log)."""
    refused = api.patch("/v1/tenants/a%00b", json={"displayName": "x"})
    assert refused.status_code in (404, 422), refused.text
    assert api.post("/v1/tenants", json={"name": "after-nul"}).status_code == 201
    objects = [e["object"] for e in _audit(api)]
    assert "/v1/tenants/a\\x00b" in objects and "/v1/tenants/after-nul" in objects
