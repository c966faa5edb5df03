"""Tokens that cannot be stretched (issue 11): the member/token sequences an attacker tried, each
ending refused; token lists and revocation by the provider and by a tenant-admin; no token that
outlives the token that minted it (SQLite and PostgreSQL)."""

from __future__ import annotations

import time

from test_identity_api import assert_problem

from conftest import Api


def make_tenants(api: Api, *names: str) -> None:
    for name in names:
        assert api.post("/v1/tenants", json={"name": name}).status_code == 201


def member_token(api: Api, tenant: str, user: str, **body: object) -> dict:
    made = api.post(f"/v1/tenants/{tenant}/members/{user}/tokens", json={"name": "t", **body})
    assert made.status_code == 201, made.text
    return made.json()


def admin_of(api: Api, tenant: str, user: str) -> Api:
    """``user`` made tenant-admin of ``tenant`` by the provider, speaking with a token minted
    there."""
    assert api.put(f"/v1/tenants/{tenant}/members/{user}", json={"role": "tenant-admin"}).is_success
    return api.as_(member_token(api, tenant, user)["token"])


def test_a_token_minted_for_a_removed_member_never_carries_later_roles(api: Api) -> None:
    """alice (acme admin) adds bob, mints a token, removes bob; globex's admin later makes bob
    its tenant-admin: alice's token is dead (401), never a globex tenant-admin."""
    make_tenants(api, "acme", "globex")
    alice = admin_of(api, "acme", "alice")
    globex_admin = admin_of(api, "globex", "gina")
    assert alice.put("/v1/tenants/acme/members/bob", json={"role": "tenant-user"}).is_success
    bobs = api.as_(member_token(alice, "acme", "bob")["token"])
    assert bobs.get("/v1/tenants/acme/jobs").status_code == 200
    assert alice.delete("/v1/tenants/acme/members/bob").status_code == 204
    assert_problem(bobs.get("/v1/tenants/acme/jobs"), 401)
    # globex's admin can only invite bob (he exists); the provider accepts for him
    invited = globex_admin.put("/v1/tenants/globex/members/bob", json={"role": "tenant-admin"})
    assert invited.status_code == 202 and invited.json()["status"] == "invited"
    assert api.post("/v1/tenants/globex/invitations/bob/accept").status_code == 200
    assert_problem(bobs.get("/v1/tenants/globex"), 401)
    assert_problem(bobs.put("/v1/tenants/globex/members/alice", json={"role": "viewer"}), 401)


def test_a_tenant_token_answers_for_its_tenant_only_with_at_most_its_role(api: Api) -> None:
    """Not removed, bob is later made globex tenant-admin and provider-admin: the acme token
    alice minted for him still answers for acme only, as tenant-user."""
    make_tenants(api, "acme", "globex")
    alice = admin_of(api, "acme", "alice")
    assert alice.put("/v1/tenants/acme/members/bob", json={"role": "tenant-user"}).is_success
    bobs = api.as_(member_token(alice, "acme", "bob")["token"])
    assert api.put("/v1/tenants/globex/members/bob", json={"role": "tenant-admin"}).is_success
    assert api.patch("/v1/users/bob", json={"platformRole": "provider-admin"}).is_success
    assert bobs.get("/v1/whoami").json() == {
        "user": "bob",
        "platformRole": None,
        "tenants": [{"tenant": "acme", "role": "tenant-user"}],
    }
    assert_problem(bobs.get("/v1/tenants/globex"), 404)
    assert_problem(bobs.put("/v1/tenants/globex/members/alice", json={"role": "viewer"}), 404)
    assert_problem(bobs.get("/v1/nodes"), 403)
    assert_problem(bobs.post("/v1/tenants", json={"name": "mine"}), 403)
    assert_problem(bobs.put("/v1/tenants/acme/members/eve", json={"role": "viewer"}), 403)
    # a token it mints carries no more than it does
    child = bobs.post("/v1/tokens", json={"name": "child"})
    assert child.status_code == 201 and child.json()["tenant"] == "acme"
    assert_problem(api.as_(child.json()["token"]).get("/v1/nodes"), 403)
    assert_problem(api.as_(child.json()["token"]).get("/v1/tenants/globex"), 404)


def test_a_lowered_role_limits_a_token_and_a_raised_one_does_not_lift_it(api: Api) -> None:
    make_tenants(api, "acme")
    alice = admin_of(api, "acme", "alice")
    alice.put("/v1/tenants/acme/members/bob", json={"role": "tenant-admin"})
    as_admin = api.as_(member_token(alice, "acme", "bob")["token"])
    assert as_admin.put("/v1/tenants/acme/members/carl", json={"role": "viewer"}).is_success
    alice.put("/v1/tenants/acme/members/bob", json={"role": "viewer"})
    assert_problem(as_admin.put("/v1/tenants/acme/members/dan", json={"role": "viewer"}), 403)
    as_viewer = api.as_(member_token(alice, "acme", "bob")["token"])
    alice.put("/v1/tenants/acme/members/bob", json={"role": "tenant-admin"})
    assert as_admin.put("/v1/tenants/acme/members/dan", json={"role": "viewer"}).is_success
    assert_problem(as_viewer.put("/v1/tenants/acme/members/erin", json={"role": "viewer"}), 403)
    assert as_viewer.get("/v1/whoami").json()["tenants"] == [{"tenant": "acme", "role": "viewer"}]


def test_a_personal_token_keeps_what_its_user_had_when_it_was_minted(api: Api) -> None:
    """The provider's personal token for carol: a tenant she joins later, a tenant she leaves
    and joins again, and a platform role raised later are none of its business."""
    make_tenants(api, "acme", "globex")
    api.post("/v1/users", json={"name": "carol", "platformRole": "viewer"})
    api.put("/v1/tenants/acme/members/carol", json={"role": "tenant-user"})
    carol = api.as_(api.post("/v1/users/carol/tokens", json={"name": "laptop"}).json()["token"])
    assert carol.get("/v1/whoami").json() == {
        "user": "carol",
        "platformRole": "viewer",
        "tenants": [{"tenant": "acme", "role": "tenant-user"}],
    }
    api.put("/v1/tenants/globex/members/carol", json={"role": "tenant-admin"})
    api.patch("/v1/users/carol", json={"platformRole": "provider-admin"})
    assert api.delete("/v1/tenants/acme/members/carol").status_code == 204
    api.put("/v1/tenants/acme/members/carol", json={"role": "tenant-admin"})
    who = carol.get("/v1/whoami").json()
    assert who == {"user": "carol", "platformRole": "viewer", "tenants": []}
    assert_problem(carol.post("/v1/tenants", json={"name": "mine"}), 403)
    assert_problem(carol.put("/v1/tenants/globex/members/x", json={"role": "viewer"}), 403)
    assert_problem(carol.put("/v1/tenants/acme/members/x", json={"role": "viewer"}), 403)
    # its platform role taken away, and given again (a new grant): it reads nothing of anyone
    api.patch("/v1/users/carol", json={"platformRole": None})
    api.patch("/v1/users/carol", json={"platformRole": "viewer"})
    assert_problem(carol.get("/v1/users"), 403)
    assert_problem(carol.get("/v1/tenants/globex"), 404)


def test_a_token_cannot_outlive_the_token_that_mints_it(api: Api) -> None:
    make_tenants(api, "acme")
    short = api.post("/v1/tokens", json={"name": "short", "expiresIn": 600}).json()
    shortlived = api.as_(short["token"])
    body = assert_problem(
        shortlived.post("/v1/tokens", json={"name": "forever", "expiresIn": 3600}), 422, "expiresIn"
    )
    assert "outlive" in body["detail"]
    inherited = shortlived.post("/v1/tokens", json={"name": "forever"})
    assert inherited.status_code == 201, inherited.text
    assert inherited.json()["expiresAt"] == short["expiresAt"]
    within = shortlived.post("/v1/tokens", json={"name": "ok", "expiresIn": 2})
    assert within.json()["expiresAt"] <= short["expiresAt"]
    # the same through the member-token and provider routes
    shortlived.put("/v1/tenants/acme/members/bob", json={"role": "viewer"})
    assert_problem(
        shortlived.post(
            "/v1/tenants/acme/members/bob/tokens", json={"name": "x", "expiresIn": 3600}
        ),
        422,
        "expiresIn",
    )
    assert_problem(
        shortlived.post("/v1/users/bob/tokens", json={"name": "x", "expiresIn": 3600}),
        422,
        "expiresIn",
    )
    bobs = shortlived.post("/v1/tenants/acme/members/bob/tokens", json={"name": "x"}).json()
    assert bobs["expiresAt"] == short["expiresAt"]
    # an expired token is refused, and so is what it minted
    brief = api.post("/v1/tokens", json={"name": "brief", "expiresIn": 1}).json()
    child = api.as_(brief["token"]).post("/v1/tokens", json={"name": "child"}).json()
    assert child["expiresAt"] == brief["expiresAt"]
    time.sleep(max(0.0, brief["expiresAt"] - time.time()) + 0.1)
    assert_problem(api.as_(brief["token"]).get("/v1/whoami"), 401)
    assert_problem(api.as_(child["token"]).get("/v1/whoami"), 401)


def test_the_provider_lists_and_revokes_anyones_tokens(api: Api) -> None:
    make_tenants(api, "acme", "globex")
    api.put("/v1/tenants/acme/members/bob", json={"role": "tenant-user"})
    api.put("/v1/tenants/globex/members/bob", json={"role": "viewer"})
    in_acme = member_token(api, "acme", "bob")
    in_globex = member_token(api, "globex", "bob")
    personal = api.post("/v1/users/bob/tokens", json={"name": "own"}).json()
    listed = api.get("/v1/users/bob/tokens").json()["items"]
    assert {(t["id"], t["tenant"]) for t in listed} == {
        (in_acme["id"], "acme"),
        (in_globex["id"], "globex"),
        (personal["id"], None),
    }
    assert all("token" not in t for t in listed)
    assert api.delete(f"/v1/tokens/{in_globex['id']}").status_code == 204
    assert_problem(api.as_(in_globex["token"]).get("/v1/whoami"), 401)
    assert api.as_(in_acme["token"]).get("/v1/whoami").status_code == 200  # only that one
    assert {t["id"] for t in api.get("/v1/users/bob/tokens").json()["items"]} == {
        in_acme["id"],
        personal["id"],
    }
    # bob's acme token sees and revokes only acme's tokens of his (not his globex membership)
    bob_acme = api.as_(in_acme["token"])
    assert [t["id"] for t in bob_acme.get("/v1/tokens").json()["items"]] == [in_acme["id"]]
    assert_problem(bob_acme.delete(f"/v1/tokens/{personal['id']}"), 404)
    assert [t["id"] for t in bob_acme.get("/v1/users/bob/tokens").json()["items"]] == [
        in_acme["id"]
    ]
    bob_own = api.as_(personal["token"])
    assert {t["id"] for t in bob_own.get("/v1/tokens").json()["items"]} == {
        in_acme["id"],
        personal["id"],
    }
    assert_problem(bob_own.get("/v1/users/admin/tokens"), 403)
    assert_problem(bob_own.get("/v1/tokens", params={"allUsers": "true"}), 403)
    everyone = api.get("/v1/tokens", params={"allUsers": "true", "limit": 1000}).json()["items"]
    assert {t["user"] for t in everyone} == {"admin", "bob"}
    assert_problem(bob_own.post("/v1/users/bob/tokens", json={"name": "more"}), 403)
    assert_problem(api.get("/v1/users/nobody/tokens"), 404)
    api.patch("/v1/users/bob", json={"disabled": True})
    assert_problem(api.post("/v1/users/bob/tokens", json={"name": "x"}), 409)


def test_a_tenant_admin_lists_and_revokes_its_tenants_tokens_only(api: Api) -> None:
    make_tenants(api, "acme", "globex")
    alice = admin_of(api, "acme", "alice")
    api.put("/v1/tenants/acme/members/bob", json={"role": "tenant-user"})
    api.put("/v1/tenants/globex/members/bob", json={"role": "tenant-user"})
    bob_acme = member_token(alice, "acme", "bob")
    bob_globex = member_token(api, "globex", "bob")
    personal = api.post("/v1/users/bob/tokens", json={"name": "own"}).json()
    listed = alice.get("/v1/tenants/acme/tokens").json()["items"]
    assert bob_acme["id"] in {t["id"] for t in listed}
    assert {t["tenant"] for t in listed} == {"acme"}
    assert not {bob_globex["id"], personal["id"]} & {t["id"] for t in listed}
    assert "globex" not in alice.get("/v1/tenants/acme/tokens").text
    # another tenant's token, or a personal one, is not acme's to revoke
    assert_problem(alice.delete(f"/v1/tenants/acme/tokens/{bob_globex['id']}"), 404)
    assert_problem(alice.delete(f"/v1/tenants/acme/tokens/{personal['id']}"), 404)
    assert_problem(alice.delete(f"/v1/tokens/{bob_globex['id']}"), 404)
    assert_problem(alice.get("/v1/tenants/globex/tokens"), 404)
    assert_problem(alice.get("/v1/users/bob/tokens"), 403)
    assert alice.delete(f"/v1/tenants/acme/tokens/{bob_acme['id']}").status_code == 204
    assert_problem(api.as_(bob_acme["token"]).get("/v1/tenants/acme/jobs"), 401)
    assert_problem(alice.delete(f"/v1/tenants/acme/tokens/{bob_acme['id']}"), 404)
    assert api.as_(bob_globex["token"]).get("/v1/tenants/globex/jobs").status_code == 200
    # a tenant-user may not list its tenant's tokens
    bob = api.as_(member_token(alice, "acme", "bob")["token"])
    assert_problem(bob.get("/v1/tenants/acme/tokens"), 403)
    assert_problem(bob.delete(f"/v1/tenants/acme/tokens/{bob_acme['id']}"), 403)


def test_removing_a_member_revokes_its_tokens_there_and_nowhere_else(api: Api) -> None:
    make_tenants(api, "acme", "globex")
    api.put("/v1/tenants/acme/members/bob", json={"role": "tenant-user"})
    api.put("/v1/tenants/globex/members/bob", json={"role": "tenant-user"})
    in_acme = member_token(api, "acme", "bob")
    child = api.as_(in_acme["token"]).post("/v1/tokens", json={"name": "child"}).json()
    in_globex = member_token(api, "globex", "bob")
    personal = api.as_(api.post("/v1/users/bob/tokens", json={"name": "own"}).json()["token"])
    assert api.delete("/v1/tenants/acme/members/bob").status_code == 204
    assert_problem(api.as_(in_acme["token"]).get("/v1/whoami"), 401)
    assert_problem(api.as_(child["token"]).get("/v1/whoami"), 401)
    assert api.as_(in_globex["token"]).get("/v1/tenants/globex/jobs").status_code == 200
    assert_problem(personal.get("/v1/tenants/acme/jobs"), 404)
    assert personal.get("/v1/tenants/globex/jobs").status_code == 200
    # back in acme, none of them answers for it
    api.put("/v1/tenants/acme/members/bob", json={"role": "tenant-admin"})
    assert_problem(api.as_(in_acme["token"]).get("/v1/tenants/acme/jobs"), 401)
    assert_problem(personal.get("/v1/tenants/acme/jobs"), 404)
