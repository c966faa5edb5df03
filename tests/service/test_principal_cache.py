"""The principal cache: a revocation made through this server holds on the next request (the
concurrent cases are in test_identity_revocation.py), one made outside it within the cache's
TTL, and a read that began before an invalidation never refills the cache."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.testclient import TestClient
from sqlalchemy import select, update

from conftest import ADMIN_TOKEN
from gpuaas.service.app import create_app
from gpuaas.service.auth import Principal, hash_token
from gpuaas.service.deps import cached_principal
from gpuaas.service.principal_cache import REFRESH_AFTER, TTL_SECONDS, PrincipalCache
from gpuaas.store.db import Database
from gpuaas.store.tables import Membership, Token, User

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def _principal(expires_at: float | None = None) -> Principal:
    return Principal(user_id=1, user="alice", token_id=7, expires_at=expires_at)


def test_a_principal_is_kept_for_the_ttl_only() -> None:
    cache = PrincipalCache(ttl=0.2)
    cache.put("d", _principal(), cache.generation)
    assert cache.get("d", time.time()) == _principal()
    time.sleep(0.25)
    assert cache.get("d", time.time()) is None


def test_an_expired_token_is_not_answered_from_the_cache() -> None:
    cache = PrincipalCache(ttl=60)
    now = time.time()
    cache.put("d", _principal(expires_at=now + 1), cache.generation)
    assert cache.get("d", now) is not None
    assert cache.get("d", now + 1) is None


def test_a_read_begun_before_an_invalidation_does_not_refill_the_cache() -> None:
    cache = PrincipalCache(ttl=60)
    cache.put("old", _principal(), cache.generation)
    read_at = cache.generation  # a request starts reading the token...
    cache.invalidate()  # ...a revocation commits meanwhile
    cache.put("d", _principal(), read_at)
    assert cache.get("d", time.time()) is None
    assert cache.get("old", time.time()) is None  # invalidation empties the cache


def test_the_cache_is_bounded() -> None:
    cache = PrincipalCache(ttl=60, max_entries=3)
    for n in range(10):
        cache.put(str(n), _principal(), cache.generation)
    assert sum(cache.get(str(n), time.time()) is not None for n in range(10)) <= 3


def test_one_request_per_entry_is_told_to_read_it_again_before_it_runs_out() -> None:
    """Past the first half of its life the first request to use an entry is answered ``None``
    (it reads the token again); every other request keeps the entry until it runs out, so
    the requests in flight when it does never all read at once."""
    cache = PrincipalCache(ttl=0.4)
    cache.put("d", _principal(), cache.generation)
    assert cache.get("d", time.time()) == _principal()  # young: nobody reads it again
    time.sleep(0.4 * REFRESH_AFTER + 0.02)
    assert cache.get("d", time.time()) is None  # the claim
    assert all(cache.get("d", time.time()) == _principal() for _ in range(20))
    time.sleep(0.4 * (1 - REFRESH_AFTER))
    assert cache.get("d", time.time()) is None  # nobody put a new one: it ran out
    assert cache.get("d", time.time()) is None


def test_a_refreshed_entry_is_trusted_for_a_whole_ttl_again() -> None:
    cache = PrincipalCache(ttl=0.4)
    cache.put("d", _principal(), cache.generation)
    time.sleep(0.4 * REFRESH_AFTER + 0.02)
    assert cache.get("d", time.time()) is None
    cache.put("d", _principal(), cache.generation)  # the claimer's read
    time.sleep(0.4 * REFRESH_AFTER - 0.05)
    assert all(cache.get("d", time.time()) == _principal() for _ in range(5))


def test_concurrent_requests_make_exactly_one_claim() -> None:
    cache = PrincipalCache(ttl=0.2)
    cache.put("d", _principal(), cache.generation)
    time.sleep(0.2 * REFRESH_AFTER + 0.02)
    answers: list[Principal | None] = []
    start = threading.Barrier(16)

    def ask() -> None:
        start.wait()
        for _ in range(50):
            answers.append(cache.get("d", time.time()))

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert answers.count(None) == 1


def test_a_request_chosen_to_read_stays_chosen_however_often_it_asks() -> None:
    """The submission asks the cache where to prepare the job, then authenticates: both must
    see the claim, or the claimer is answered from the entry and nobody reads the token."""
    app = FastAPI()
    app.state.principals = cache = PrincipalCache(ttl=0.2)
    cache.put("d", _principal(), cache.generation)
    time.sleep(0.2 * REFRESH_AFTER + 0.02)
    chosen = Request({"type": "http", "app": app, "headers": []})
    other = Request({"type": "http", "app": app, "headers": []})
    assert cached_principal(chosen, "d", time.time()) is None
    assert cached_principal(chosen, "d", time.time()) is None
    assert cached_principal(other, "d", time.time()) == _principal()


def test_a_token_found_refused_on_a_refresh_is_refused_at_once(
    sqlite_url: str, tmp_path: Path, settings_for: Any
) -> None:
    """Revoked outside this process: the request that reads the token again is refused, and
    so is every request after it, though the entry had time left."""
    with TestClient(create_app(settings_for(sqlite_url, tmp_path))) as client:
        cache: PrincipalCache = client.app.state.principals  # type: ignore[attr-defined]
        cache.ttl = 60.0
        assert client.get("/v1/whoami", headers=ADMIN).status_code == 200
        other = Database(sqlite_url)  # another process's write: no event reaches this one
        with other.sessions() as s:
            admin = Token.token_hash == hash_token(ADMIN_TOKEN)
            s.execute(update(Token).where(admin).values(revoked=True))
            s.commit()
        other.dispose()
        assert client.get("/v1/whoami", headers=ADMIN).status_code == 200  # the entry
        entry = cache._entries[hash_token(ADMIN_TOKEN)]
        entry.refresh_at = time.monotonic()  # its second half, 30 s on
        assert client.get("/v1/whoami", headers=ADMIN).status_code == 401  # the claimer read
        assert client.get("/v1/whoami", headers=ADMIN).status_code == 401


def test_the_documented_bound_is_one_second() -> None:
    assert TTL_SECONDS == 1.0


def test_identity_writes_in_this_process_invalidate_at_commit(
    sqlite_url: str, tmp_path: Path, settings_for: Any
) -> None:
    with TestClient(create_app(settings_for(sqlite_url, tmp_path))) as client:
        cache: PrincipalCache = client.app.state.principals  # type: ignore[attr-defined]
        db: Database = client.app.state.db  # type: ignore[attr-defined]
        writes = {
            "bulk update of tokens": lambda s: s.execute(
                update(Token).where(Token.id == -1).values(revoked=True)
            ),
            "a user changed": lambda s: setattr(s.scalars(select(User)).first(), "name", "root"),
            "a membership changed": lambda s: s.delete(s.scalars(select(Membership)).first()),
        }
        for what, write in writes.items():
            before = cache.generation
            with db.sessions() as session:
                write(session)
                session.flush()
                assert cache.generation == before, f"{what}: invalidated before the commit"
                session.commit()
            assert cache.generation == before + 1, what
        before = cache.generation
        with db.sessions() as session:  # a job-only transaction leaves the cache alone
            session.execute(select(Token.id)).all()
            session.commit()
        assert cache.generation == before


def test_a_revocation_outside_this_process_holds_within_the_ttl(
    sqlite_url: str, tmp_path: Path, settings_for: Any
) -> None:
    with TestClient(create_app(settings_for(sqlite_url, tmp_path))) as client:
        cache: PrincipalCache = client.app.state.principals  # type: ignore[attr-defined]
        cache.ttl = 0.5
        assert client.get("/v1/whoami", headers=ADMIN).status_code == 200
        assert cache.get(hash_token(ADMIN_TOKEN), time.time()) is not None
        other = Database(sqlite_url)  # another process's write: no event reaches this one
        with other.sessions() as s:
            admin = Token.token_hash == hash_token(ADMIN_TOKEN)
            s.execute(update(Token).where(admin).values(revoked=True))
            s.commit()
        other.dispose()
        revoked_at = time.monotonic()
        while client.get("/v1/whoami", headers=ADMIN).status_code == 200:
            assert time.monotonic() - revoked_at < cache.ttl, "answered past the TTL"
        assert client.get("/v1/whoami", headers=ADMIN).status_code == 401


def test_a_revocation_through_the_api_holds_on_the_next_request(
    sqlite_url: str, tmp_path: Path, settings_for: Any
) -> None:
    with TestClient(create_app(settings_for(sqlite_url, tmp_path))) as client:
        client.app.state.principals.ttl = 3600  # type: ignore[attr-defined]
        made = client.post("/v1/users/admin/tokens", json={"name": "t"}, headers=ADMIN)
        assert made.status_code == 201, made.text
        mine = {"Authorization": f"Bearer {made.json()['token']}"}
        assert client.get("/v1/whoami", headers=mine).status_code == 200  # now cached
        assert client.delete(f"/v1/tokens/{made.json()['id']}", headers=ADMIN).status_code == 204
        assert client.get("/v1/whoami", headers=mine).status_code == 401
