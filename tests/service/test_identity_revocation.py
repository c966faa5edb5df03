"""Revocation, disabling a user and removing a member hold on the very next request, under 8
concurrent clients, against the app served by uvicorn on a real socket and a real database
(SQLite and PostgreSQL).

Eight threads keep reading the tenant's jobs and submitting jobs (the submission's own
authentication path) with one token while the provider acts. Every request a client *sent*
after the action's answer came back must be refused; before, they succeeded. (An earlier token
cache kept a principal for 5 s and could be refilled by a request that had read before the
revocation committed; the principal cache, service/principal_cache.py, empties when the change
commits and refuses a refill read before it: this is the test that holds it to that.)
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from job_world import build_world, job_spec

from conftest import ADMIN_TOKEN
from gpuaas.service.app import create_app
from gpuaas.store.db import Database

CLIENTS = 8


@contextmanager
def served(settings: Any) -> Iterator[str]:
    """The app under uvicorn in a thread, on a free port; yields its base URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    app = create_app(settings)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


Action = Callable[[httpx.Client, dict[str, Any]], None]


def revoke(admin: httpx.Client, token: dict[str, Any]) -> None:
    assert admin.delete(f"/v1/tokens/{token['id']}").status_code == 204


def revoke_in_tenant(admin: httpx.Client, token: dict[str, Any]) -> None:
    assert admin.delete(f"/v1/tenants/acme/tokens/{token['id']}").status_code == 204


def disable(admin: httpx.Client, token: dict[str, Any]) -> None:
    assert admin.patch("/v1/users/alice", json={"disabled": True}).status_code == 200


def remove(admin: httpx.Client, token: dict[str, Any]) -> None:
    assert admin.delete("/v1/tenants/acme/members/alice").status_code == 204


#: (action, whether the token is minted in the tenant, what a request gets afterwards)
CASES: dict[str, tuple[Action, bool, int]] = {
    "revoke": (revoke, False, 401),
    "revoke-in-tenant": (revoke_in_tenant, True, 401),
    "disable-user": (disable, False, 401),
    "remove-member-tenant-token": (remove, True, 401),
    "remove-member-personal-token": (remove, False, 404),
}


@pytest.mark.parametrize("case", list(CASES))
def test_refused_on_the_very_next_request(
    case: str, db_url: str, tmp_path: Path, settings_for: Any
) -> None:
    action, in_tenant, refused = CASES[case]
    db = Database(db_url)
    build_world(db)
    db.dispose()
    with served(settings_for(db_url, tmp_path)) as url:
        admin = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        if in_tenant:
            made = admin.post("/v1/tenants/acme/members/alice/tokens", json={"name": "ci"})
        else:
            made = admin.post("/v1/users/alice/tokens", json={"name": "own"})
        assert made.status_code == 201, made.text
        token = made.json()
        seen: list[tuple[float, int]] = []
        stop = threading.Event()
        lock = threading.Lock()

        def client(n: int) -> None:
            headers = {"Authorization": f"Bearer {token['token']}"}
            with httpx.Client(base_url=url, headers=headers, timeout=60) as http:
                i = 0
                while not stop.is_set():
                    i += 1
                    sent = time.monotonic()
                    if n % 2:
                        r = http.post("/v1/tenants/acme/jobs", json=job_spec(f"j-{n}-{i}"))
                    else:
                        r = http.get("/v1/tenants/acme/jobs", params={"limit": 1})
                    with lock:
                        seen.append((sent, r.status_code))

        threads = [threading.Thread(target=client, args=(n,)) for n in range(CLIENTS)]
        for t in threads:
            t.start()
        try:
            _wait_for(lambda: sum(1 for _, s in seen if s in (200, 201)) >= 3 * CLIENTS)
            action(admin, token)
            done = time.monotonic()
            _wait_for(lambda: sum(1 for sent, _ in seen if sent > done) >= 5 * CLIENTS)
        finally:
            stop.set()
            for t in threads:
                t.join(60)
            admin.close()
    after = [status for sent, status in seen if sent > done]
    before = [status for sent, status in seen if sent <= done]
    assert len(after) >= 5 * CLIENTS
    assert set(after) == {refused}, f"{case}: after the action: {sorted(set(after))}"
    assert set(before) <= {200, 201, refused}, sorted(set(before))


def _wait_for(condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
