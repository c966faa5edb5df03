"""Tenants, users, memberships and tokens through the REST API (SQLite and PostgreSQL)."""

from __future__ import annotations

import hashlib

from conftest import Api

PROBLEM = "application/problem+json"


def token_for(api: Api, tenant: str, user: str, role: str) -> str:
    """Make ``user`` a ``role`` of ``tenant`` (as the provider admin) and return a token."""
    assert api.put(f"/v1/tenants/{tenant}/members/{user}", json={"role": role}).status_code == 200
    made = api.post(f"/v1/tenants/{tenant}/members/{user}/tokens", json={"name": "t"})
    assert made.status_code == 201, made.text
    return made.json()["token"]


def assert_problem(response: object, status: int, field: str | None = None) -> dict:
    r = response  # an httpx.Response
    assert r.status_code == status, r.text  # type: ignore[attr-defined]
    assert r.headers["content-type"].startswith(PROBLEM)  # type: ignore[attr-defined]
    body = r.json()  # type: ignore[attr-defined]
    assert body["status"] == status
    if field is not None:
        assert any(e["field"] == field for e in body.get("errors", [])), body
    return body


def test_tenant_crud_pagination_and_validation(api: Api) -> None:
    for name in ("acme", "beta", "gamma"):
        r = api.post("/v1/tenants", json={"name": name, "displayName": name.title()})
        assert r.status_code == 201, r.text
    created = api.post(
        "/v1/tenants",
        json={"name": "delta", "capacity": {"h100": {"nvidia.com/gpu": 16, "memory": "2048Gi"}}},
    )
    assert created.json()["capacity"] == {"h100": {"nvidia.com/gpu": "16", "memory": "2Ti"}}
    assert created.json()["createdAt"] > 0

    first = api.get("/v1/tenants", params={"limit": 2}).json()
    assert [t["name"] for t in first["items"]] == ["acme", "beta"]
    second = api.get("/v1/tenants", params={"limit": 2, "after": first["next"]}).json()
    assert [t["name"] for t in second["items"]] == ["delta", "gamma"]
    assert second["next"] is None

    assert_problem(api.post("/v1/tenants", json={"name": "Bad_Name"}), 422, "name")
    assert_problem(api.post("/v1/tenants", json={"name": "acme"}), 409)
    assert_problem(api.post("/v1/tenants", json={"name": "x", "extra": 1}), 422, "extra")
    bad_quantity = {"name": "x", "capacity": {"h100": {"nvidia.com/gpu": "1.5"}}}
    assert_problem(api.post("/v1/tenants", json=bad_quantity), 422, "capacity.h100.nvidia.com/gpu")
    assert_problem(api.get("/v1/tenants", params={"limit": 0}), 422, "limit")
    nul = {"displayName": "a\u0000b"}  # PostgreSQL cannot store it: refused on both
    assert_problem(api.patch("/v1/tenants/acme", json=nul), 422, "displayName")
    assert api.get("/v1/tenants", params={"after": "acme\u0000"}).json()["items"][0]["name"] == (
        "beta"
    )

    patched = api.patch("/v1/tenants/acme", json={"displayName": "ACME Corp"})
    assert patched.json()["displayName"] == "ACME Corp"
    assert api.get("/v1/tenants/acme").json()["displayName"] == "ACME Corp"
    assert api.delete("/v1/tenants/gamma").status_code == 204
    assert_problem(api.get("/v1/tenants/gamma"), 404)


def test_authorization_basics(api: Api) -> None:
    api.post("/v1/tenants", json={"name": "acme"})
    api.post("/v1/tenants", json={"name": "beta"})
    user = api.as_(token_for(api, "acme", "alice", "tenant-user"))
    admin = api.as_(token_for(api, "acme", "ann", "tenant-admin"))

    assert_problem(api.as_(None).get("/v1/whoami"), 401)
    assert_problem(api.as_("gpa_not-a-real-token").get("/v1/tenants"), 401)
    assert_problem(user.post("/v1/tenants", json={"name": "mine"}), 403)
    assert_problem(user.get("/v1/users"), 403)
    assert_problem(user.get("/v1/tenants/beta"), 404)  # exists, but not theirs
    assert_problem(user.put("/v1/tenants/acme/members/bob", json={"role": "viewer"}), 403)
    assert [t["name"] for t in user.get("/v1/tenants").json()["items"]] == ["acme"]

    who = user.get("/v1/whoami").json()
    assert who == {
        "user": "alice",
        "platformRole": None,
        "tenants": [{"tenant": "acme", "role": "tenant-user"}],
    }
    assert user.get("/v1/users/alice").json()["name"] == "alice"  # a user reads itself
    assert_problem(user.get("/v1/users/ann"), 403)

    # A tenant admin manages members of its own tenant only.
    assert admin.put("/v1/tenants/acme/members/bob", json={"role": "viewer"}).status_code == 200
    assert_problem(admin.put("/v1/tenants/beta/members/bob", json={"role": "viewer"}), 404)
    assert_problem(
        admin.put("/v1/tenants/acme/members/bob", json={"role": "provider-admin"}), 422, "role"
    )
    members = admin.get("/v1/tenants/acme/members").json()["items"]
    assert {(m["user"], m["role"]) for m in members} == {
        ("alice", "tenant-user"),
        ("ann", "tenant-admin"),
        ("bob", "viewer"),
    }
    # ... and a token it mints for a member with roles elsewhere carries its tenant's role only.
    api.put("/v1/tenants/beta/members/bob", json={"role": "tenant-user"})
    minted_for_bob = admin.post("/v1/tenants/acme/members/bob/tokens", json={"name": "x"})
    bob = api.as_(minted_for_bob.json()["token"])
    assert bob.get("/v1/whoami").json()["tenants"] == [{"tenant": "acme", "role": "viewer"}]
    assert_problem(bob.get("/v1/tenants/beta"), 404)
    minted = admin.post("/v1/tenants/acme/members/alice/tokens", json={"name": "ci"})
    assert minted.status_code == 201 and minted.json()["user"] == "alice"
    assert api.as_(minted.json()["token"]).get("/v1/whoami").json()["user"] == "alice"
    # Removing a member takes effect at once: the tokens minted for it there are revoked.
    assert admin.delete("/v1/tenants/acme/members/alice").status_code == 204
    assert_problem(user.get("/v1/tenants/acme"), 401)
    assert_problem(admin.delete("/v1/tenants/acme/members/alice"), 404)


def test_users(api: Api) -> None:
    made = api.post("/v1/users", json={"name": "carol", "platformRole": "viewer"})
    assert made.status_code == 201, made.text
    assert made.json()["platformRole"] == "viewer"
    assert_problem(
        api.post("/v1/users", json={"name": "dave", "platformRole": "root"}), 422, "platformRole"
    )
    assert_problem(api.post("/v1/users", json={"name": "Not Valid"}), 422, "name")
    assert_problem(api.post("/v1/users", json={"name": "carol"}), 409)
    names = [u["name"] for u in api.get("/v1/users").json()["items"]]
    assert names == ["admin", "carol"]

    # A platform viewer reads everything and writes nothing.
    created = api.post("/v1/tokens", json={"name": "x"})  # admin's own second token
    assert created.status_code == 201
    viewer_token = _token_of(api, "carol")
    viewer = api.as_(viewer_token)
    assert viewer.get("/v1/users").status_code == 200
    assert_problem(viewer.post("/v1/users", json={"name": "eve"}), 403)

    assert api.patch("/v1/users/carol", json={"platformRole": None}).json()["platformRole"] is None
    assert_problem(api.patch("/v1/users/admin", json={"platformRole": None}), 409)
    assert_problem(api.delete("/v1/users/admin"), 409)  # the last provider admin stays
    assert api.patch("/v1/users/carol", json={"disabled": True}).json()["disabled"] is True
    assert_problem(viewer.get("/v1/whoami"), 401)
    assert api.delete("/v1/users/carol").status_code == 204
    assert_problem(api.get("/v1/users/carol"), 404)


def _token_of(api: Api, user: str) -> str:
    """A personal token for ``user``, minted by the provider admin: it carries the user's roles
    now (a token minted in a tenant would carry that tenant's role only)."""
    made = api.post(f"/v1/users/{user}/tokens", json={"name": "t"})
    assert made.status_code == 201, made.text
    assert made.json()["tenant"] is None
    return made.json()["token"]


def test_tokens(api: Api) -> None:
    made = api.post("/v1/tokens", json={"name": "ci", "expiresIn": 3600})
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["fingerprint"] == hashlib.sha256(body["token"].encode()).hexdigest()[:8]
    assert body["fingerprint"] not in body["token"] and body["expiresAt"] > body["createdAt"]
    mine = api.as_(body["token"])
    assert mine.get("/v1/whoami").json()["platformRole"] == "provider-admin"
    listed = api.get("/v1/tokens").json()["items"]
    assert {t["name"] for t in listed} == {"bootstrap", "ci"}
    assert all("token" not in t for t in listed)  # secrets are shown once only
    assert_problem(api.post("/v1/tokens", json={"name": "x", "expiresIn": 0}), 422, "expiresIn")
    assert_problem(api.post("/v1/tokens", json={}), 422, "name")
    assert_problem(api.delete(f"/v1/tokens/{10**30}"), 404)
    assert_problem(api.get("/v1/tokens", params={"after": str(10**23)}), 422, "after")

    api.post("/v1/tenants", json={"name": "acme"})
    alice = api.as_(token_for(api, "acme", "alice", "tenant-user"))
    alice_token = alice.post("/v1/tokens", json={"name": "laptop"}).json()
    assert_problem(alice.delete(f"/v1/tokens/{body['id']}"), 404)  # not hers
    assert alice.delete(f"/v1/tokens/{alice_token['id']}").status_code == 204
    assert_problem(api.as_(alice_token["token"]).get("/v1/whoami"), 401)
    assert api.delete(f"/v1/tokens/{body['id']}").status_code == 204
    assert_problem(mine.get("/v1/whoami"), 401)


def test_capacity_bounds_tenant_cluster_queues(api: Api) -> None:
    api.post("/v1/flavors", json={"name": "h100", "spec": {}})
    api.post("/v1/tenants", json={"name": "acme", "capacity": {"h100": {"nvidia.com/gpu": 8}}})
    queue = {
        "name": "acme-main",
        "spec": {
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}],
                        }
                    ],
                }
            ]
        },
    }
    assert api.post("/v1/tenants/acme/cluster-queues", json=queue).status_code == 201
    body = assert_problem(
        api.patch("/v1/tenants/acme", json={"capacity": {"h100": {"nvidia.com/gpu": 4}}}),
        422,
        "capacity.h100.nvidia.com/gpu",
    )
    assert "above its capacity of 4" in body["detail"]
    # Deleting the tenant takes its queues along.
    assert api.delete("/v1/tenants/acme").status_code == 204
    assert api.get("/v1/cluster-queues").json()["items"] == []
