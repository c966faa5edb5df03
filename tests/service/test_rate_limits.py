"""Rate limits: per token, per tenant, and back-off after failed authentication, each a 429
with Retry-After; a request with no token guesses nothing and is not counted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from conftest import ADMIN_TOKEN, Api
from gpuaas.service.app import create_app
from gpuaas.service.rate_limits import Buckets, RateLimits, RateLimitSettings


def _world(api: Api) -> dict[str, str]:
    """Two tenants, acme with two admins' tokens and globex with one."""
    tokens: dict[str, str] = {}
    for tenant in ("acme", "globex"):
        made = api.post("/v1/tenants", json={"name": tenant, "displayName": tenant})
        assert made.status_code == 201, made.text
    for user, tenant in (("ann", "acme"), ("abe", "acme"), ("gil", "globex")):
        member = api.put(f"/v1/tenants/{tenant}/members/{user}", json={"role": "tenant-admin"})
        assert member.status_code == 200, member.text
        minted = api.post(f"/v1/users/{user}/tokens", json={"name": "t"})
        assert minted.status_code == 201, minted.text
        tokens[user] = minted.json()["token"]
    return tokens


@pytest.fixture
def limited(sqlite_url: str, tmp_path: Path, settings_for: Any) -> Iterator[Api]:
    settings = settings_for(
        sqlite_url, tmp_path, rate_per_token=0, rate_per_tenant=0, auth_free_failures=3
    )
    with TestClient(create_app(settings)) as client:
        yield Api(client, ADMIN_TOKEN)


def _too_many(response: Any) -> int:
    assert response.status_code == 429, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    retry = int(response.headers["Retry-After"])
    assert retry >= 1
    return retry


def test_failed_authentication_backs_off_and_doubles(limited: Api) -> None:
    for _ in range(3):  # the free failures: plain 401s
        assert limited.as_("gpa_guess").get("/v1/whoami").status_code == 401
    assert limited.as_(None).get("/v1/whoami").status_code == 401  # no token: not an attempt
    revoked = limited.post("/v1/tokens", json={"name": "gone"}).json()
    assert limited.delete(f"/v1/tokens/{revoked['id']}").status_code == 204
    for _ in range(5):  # a revoked token is no guess: its client is told 401, not backed off
        assert limited.as_(revoked["token"]).get("/v1/whoami").status_code == 401
    assert limited.as_("gpa_guess").get("/v1/whoami").status_code == 401  # the 4th: 1 s
    assert _too_many(limited.get("/v1/whoami")) == 1  # even a good token waits it out
    time.sleep(1.1)
    assert limited.get("/v1/whoami").status_code == 200
    assert limited.as_("gpa_guess").get("/v1/whoami").status_code == 401  # the 5th: 2 s
    assert _too_many(limited.as_("gpa_guess").get("/v1/whoami")) in (1, 2)  # 2 s, less the wait


def test_a_token_and_a_tenant_have_their_own_rates(
    sqlite_url: str, tmp_path: Path, settings_for: Any
) -> None:
    settings = settings_for(sqlite_url, tmp_path, rate_per_token=1000, rate_per_tenant=1000)
    with TestClient(create_app(settings)) as client:
        api = Api(client, ADMIN_TOKEN)
        tokens = _world(api)
        # tighter limits on the same app: the rules, not the numbers, are under test
        client.app.state.rate_limits = RateLimits(  # type: ignore[attr-defined]
            RateLimitSettings(per_token=4, per_tenant=6, free_failures=0, window=600)
        )
        ann, abe, gil = (api.as_(tokens[u]) for u in ("ann", "abe", "gil"))
        url = "/v1/tenants/{}/jobs"
        codes = [ann.get(url.format("acme")).status_code for _ in range(5)]
        assert codes[:4] == [200] * 4 and codes[4] == 429  # ann's token: 4 a second
        # ann's refused 5th was not counted against acme: abe's own token makes acme's 5th, 6th
        assert [abe.get(url.format("acme")).status_code for _ in range(2)] == [200, 200]
        assert _too_many(abe.get(url.format("acme"))) > 1  # acme's 7th: the tenant's rate
        assert gil.get(url.format("globex")).status_code == 200  # another tenant is untouched
        assert abe.get("/v1/whoami").status_code == 200  # no tenant in the path: token only
        assert _too_many(ann.get("/v1/whoami")) > 1  # ann's token is spent wherever it goes


def test_off_when_zero() -> None:
    limits = RateLimits(RateLimitSettings(per_token=0, per_tenant=0, free_failures=0))
    for _ in range(10_000):
        limits.token("h")
        limits.tenant("t")
        limits.failed("c", 0.0)
    limits.check_client("c", 0.0)


def test_a_bucket_spends_its_limit_at_once_and_earns_it_back_at_its_rate() -> None:
    buckets = Buckets(limit=10, window=2.0)  # 10 at once, back at 5 a second
    assert [buckets.take("k", 100.0) for _ in range(10)] == [0.0] * 10
    assert buckets.take("k", 100.0) == pytest.approx(0.2)  # one token back in 1/5 s
    assert buckets.take("other", 100.0) == 0.0  # keys are apart
    assert buckets.take("k", 100.2) == 0.0
    assert buckets.take("k", 100.2) > 0
    assert [buckets.take("k", 1000.0) for _ in range(10)] == [0.0] * 10  # never above the limit
    assert buckets.take("k", 1000.0) > 0
