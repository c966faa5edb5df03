"""Adding a user that exists already is an invitation, never a silent adoption (SQLite and
PostgreSQL)."""

from __future__ import annotations

from test_identity_api import assert_problem
from test_identity_tokens import admin_of, make_tenants, member_token

from conftest import Api


def personal(api: Api, user: str) -> Api:
    made = api.post(f"/v1/users/{user}/tokens", json={"name": "own"})
    assert made.status_code == 201, made.text
    return api.as_(made.json()["token"])


def test_an_existing_user_is_invited_and_joins_when_it_accepts(api: Api) -> None:
    make_tenants(api, "acme", "globex")
    gina = admin_of(api, "globex", "gina")
    api.put("/v1/tenants/acme/members/alice", json={"role": "tenant-admin"})
    alice = personal(api, "alice")

    invited = gina.put("/v1/tenants/globex/members/alice", json={"role": "tenant-user"})
    assert invited.status_code == 202, invited.text
    assert invited.json()["status"] == "invited" and invited.json()["role"] == "tenant-user"
    # not a member yet: no token can be minted for her there, she is not listed
    assert_problem(gina.post("/v1/tenants/globex/members/alice/tokens", json={"name": "x"}), 404)
    assert "alice" not in gina.get("/v1/tenants/globex/members").text
    assert_problem(gina.delete("/v1/tenants/globex/members/alice"), 404)
    # asking again changes the role offered, still an invitation
    again = gina.put("/v1/tenants/globex/members/alice", json={"role": "viewer"})
    assert again.status_code == 202
    pending = gina.get("/v1/tenants/globex/invitations").json()["items"]
    assert [(i["user"], i["role"], i["invitedBy"]) for i in pending] == [
        ("alice", "viewer", "gina")
    ]
    mine = alice.get("/v1/invitations").json()["items"]
    assert [(i["tenant"], i["role"]) for i in mine] == [("globex", "viewer")]
    assert alice.get("/v1/tenants/globex").status_code == 404

    accepted = alice.post("/v1/tenants/globex/invitations/alice/accept")
    assert accepted.status_code == 200, accepted.text
    assert accepted.json() == {**accepted.json(), "user": "alice", "role": "viewer"}
    assert alice.get("/v1/invitations").json()["items"] == []
    members = {m["user"]: m["role"] for m in gina.get("/v1/tenants/globex/members").json()["items"]}
    assert members["alice"] == "viewer"
    # her token from before does not gain the membership; one minted now for it does
    assert_problem(alice.get("/v1/tenants/globex"), 404)
    in_globex = api.as_(member_token(gina, "globex", "alice")["token"])
    assert in_globex.get("/v1/tenants/globex").status_code == 200
    assert_problem(in_globex.get("/v1/tenants/acme"), 404)
    assert_problem(alice.post("/v1/tenants/globex/invitations/alice/accept"), 404)


def test_who_may_answer_an_invitation(api: Api) -> None:
    make_tenants(api, "acme", "globex")
    gina = admin_of(api, "globex", "gina")
    api.put("/v1/tenants/acme/members/alice", json={"role": "tenant-user"})
    api.put("/v1/tenants/globex/members/gus", json={"role": "tenant-user"})
    alice_in_acme = api.as_(member_token(api, "acme", "alice")["token"])
    gus = api.as_(member_token(api, "globex", "gus")["token"])
    api.post("/v1/users", json={"name": "mallory"})
    mallory = personal(api, "mallory")
    assert gina.put(
        "/v1/tenants/globex/members/alice", json={"role": "tenant-admin"}
    ).status_code == (202)
    # a token minted in acme is acme's, not alice's consent
    body = assert_problem(alice_in_acme.post("/v1/tenants/globex/invitations/alice/accept"), 403)
    assert "token of your own" in body["detail"]
    # the inviting admin cannot accept for her; a member reads nothing it may act on
    assert_problem(gina.post("/v1/tenants/globex/invitations/alice/accept"), 403)
    assert_problem(gus.post("/v1/tenants/globex/invitations/alice/accept"), 403)
    assert_problem(gus.delete("/v1/tenants/globex/invitations/alice"), 403)
    # a stranger learns nothing: the tenant does not exist for it
    for url in (
        "/v1/tenants/globex/invitations/alice/accept",
        "/v1/tenants/globex/invitations/nobody/accept",
    ):
        assert_problem(mallory.post(url), 404)
    assert_problem(mallory.delete("/v1/tenants/globex/invitations/alice"), 404)
    assert_problem(mallory.get("/v1/tenants/globex/invitations"), 404)
    assert_problem(alice_in_acme.get("/v1/tenants/globex/invitations"), 404)
    assert mallory.get("/v1/invitations").json()["items"] == []
    # nothing changed
    assert [i["user"] for i in gina.get("/v1/tenants/globex/invitations").json()["items"]] == [
        "alice"
    ]
    # the provider accepts for her
    assert api.post("/v1/tenants/globex/invitations/alice/accept").json()["role"] == "tenant-admin"


def test_an_invitation_can_be_withdrawn_or_declined(api: Api) -> None:
    make_tenants(api, "acme", "globex")
    gina = admin_of(api, "globex", "gina")
    for user in ("alice", "bob"):
        api.post("/v1/users", json={"name": user})
        assert gina.put(
            f"/v1/tenants/globex/members/{user}", json={"role": "viewer"}
        ).status_code == (202)
    assert gina.delete("/v1/tenants/globex/invitations/alice").status_code == 204
    bob = personal(api, "bob")
    assert bob.delete("/v1/tenants/globex/invitations/bob").status_code == 204
    assert gina.get("/v1/tenants/globex/invitations").json()["items"] == []
    assert_problem(bob.post("/v1/tenants/globex/invitations/bob/accept"), 404)
    assert_problem(gina.delete("/v1/tenants/globex/invitations/bob"), 404)


def test_new_names_are_created_and_the_provider_adds_directly(api: Api) -> None:
    make_tenants(api, "acme", "globex")
    gina = admin_of(api, "globex", "gina")
    created = gina.put("/v1/tenants/globex/members/newbie", json={"role": "tenant-user"})
    assert created.status_code == 200 and created.json()["status"] == "active"
    # an invitation the provider then turns into a membership by its own PUT
    api.put("/v1/tenants/acme/members/alice", json={"role": "viewer"})
    assert gina.put("/v1/tenants/globex/members/alice", json={"role": "viewer"}).status_code == 202
    direct = api.put("/v1/tenants/globex/members/alice", json={"role": "tenant-user"})
    assert direct.status_code == 200 and direct.json()["status"] == "active"
    assert gina.get("/v1/tenants/globex/invitations").json()["items"] == []
    # a member's role changes in place (no invitation for an existing member)
    assert gina.put("/v1/tenants/globex/members/alice", json={"role": "viewer"}).status_code == 200
    # deleting the tenant takes its invitations along
    api.post("/v1/users", json={"name": "carol"})
    gina.put("/v1/tenants/globex/members/carol", json={"role": "viewer"})
    carol = personal(api, "carol")
    assert len(carol.get("/v1/invitations").json()["items"]) == 1
    assert api.delete("/v1/tenants/globex").status_code == 204
    assert carol.get("/v1/invitations").json()["items"] == []
