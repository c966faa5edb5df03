"""The identity rules without HTTP: each call takes a session and the caller's principal (loaded
from a real token, as a request would) and answers with the API's view or its problem."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.service.auth import Principal, bootstrap_admin, load_principal
from gpuaas.service.errors import ApiError
from gpuaas.service.identity import members, tenants, tokens, users
from gpuaas.service.models.identity import TenantIn, TenantPatch, TokenIn, UserIn, UserPatch
from gpuaas.store.db import Database
from gpuaas.store.tables import Token


@pytest.fixture
def session(tmp_path: Path) -> Iterator[Session]:
    db = Database(f"sqlite:///{tmp_path / 'gpuaas.db'}")
    db.upgrade()
    with db.sessions() as s:
        yield s
    db.dispose()


def as_principal(session: Session, secret: str) -> Principal:
    found = load_principal(session, secret, time.time())
    assert found is not None, "the token should authenticate"
    return found


@pytest.fixture
def admin(session: Session) -> Principal:
    secret = bootstrap_admin(session, None, time.time())
    assert secret is not None
    session.commit()
    return as_principal(session, secret)


def personal(session: Session, admin: Principal, user: str) -> Principal:
    secret = tokens.create_user_token(session, admin, user, TokenIn(name="own")).token
    return as_principal(session, secret)


def fails(status: int, call, *args) -> ApiError:  # type: ignore[no-untyped-def]
    with pytest.raises(ApiError) as caught:
        call(*args)
    assert caught.value.status == status, caught.value.detail
    return caught.value


def test_tenant_terms_are_written_canonically_and_checked(
    session: Session, admin: Principal
) -> None:
    body = TenantIn(name="acme", max_job={"memory": "2048Gi", "nvidia.com/gpu": 8})
    made = tenants.create_tenant(session, admin, body)
    assert made.max_job == {"memory": "2Ti", "nvidia.com/gpu": "8"} and made.cohort == "acme"
    bad = TenantPatch(lending={"a100": {"nvidia.com/gpu": 1}})
    error = fails(422, tenants.update_tenant, session, admin, "acme", bad)
    assert error.field == "lending" and "parentCohort" in error.detail
    fails(409, tenants.create_tenant, session, admin, TenantIn(name="acme"))


def test_the_last_provider_admin_stays(session: Session, admin: Principal) -> None:
    for call, *args in (
        (users.update_user, "admin", UserPatch(platform_role=None)),
        (users.update_user, "admin", UserPatch(disabled=True)),
        (users.delete_user, "admin"),
    ):
        assert "last provider-admin" in fails(409, call, session, admin, *args).detail
    users.create_user(session, admin, UserIn(name="bob", platform_role="provider-admin"))
    users.update_user(session, admin, "admin", UserPatch(platform_role="viewer"))
    assert users.get_user(session, admin, "admin").platform_role == "viewer"


def test_an_existing_user_is_invited_and_accepts_with_its_own_token(
    session: Session, admin: Principal
) -> None:
    tenants.create_tenant(session, admin, TenantIn(name="acme"))
    members.put_member(session, admin, "acme", "ann", "tenant-admin")  # new name: a member
    ann = personal(session, admin, "ann")
    users.create_user(session, admin, UserIn(name="carl"))
    invited = members.put_member(session, ann, "acme", "carl", "tenant-user")
    assert invited.status == members.INVITED
    assert [m.user for m in members.list_members(session, ann, "acme", 100, None).items] == ["ann"]
    carl_member = members.put_member(session, admin, "acme", "carl", "tenant-user")
    assert carl_member.status == "active"  # a provider-admin adds at once
    members.delete_member(session, ann, "acme", "carl")
    members.put_member(session, ann, "acme", "carl", "viewer")
    carl = personal(session, admin, "carl")
    accepted = members.accept_invitation(session, carl, "acme", "carl")
    assert (accepted.user, accepted.role, accepted.status) == ("carl", "viewer", "active")
    fails(404, members.accept_invitation, session, carl, "acme", "carl")


def test_a_tenant_token_cannot_answer_an_invitation_and_dies_with_the_membership(
    session: Session, admin: Principal
) -> None:
    tenants.create_tenant(session, admin, TenantIn(name="acme"))
    tenants.create_tenant(session, admin, TenantIn(name="beta"))
    members.put_member(session, admin, "acme", "dan", "tenant-user")
    minted = tokens.create_member_token(session, admin, "acme", "dan", TokenIn(name="t"))
    dan_in_acme = as_principal(session, minted.token)
    users.create_user(session, admin, UserIn(name="eve"))
    members.put_member(session, admin, "beta", "eve", "tenant-admin")
    eve = personal(session, admin, "eve")
    assert members.put_member(session, eve, "beta", "dan", "tenant-user").status == "invited"
    fails(403, members.accept_invitation, session, dan_in_acme, "beta", "dan")
    members.delete_member(session, admin, "acme", "dan")
    assert session.scalar(select(Token.revoked).where(Token.id == minted.id)) is True
    assert load_principal(session, minted.token, time.time()) is None


def test_a_token_never_outlives_the_token_that_mints_it(session: Session, admin: Principal) -> None:
    short = tokens.create_token(session, admin, TokenIn(name="short", expires_in=60))
    caller = as_principal(session, short.token)
    error = fails(422, tokens.create_token, session, caller, TokenIn(name="long", expires_in=600))
    assert error.field == "expiresIn"
    child = tokens.create_token(session, caller, TokenIn(name="child"))
    assert child.expires_at == short.expires_at
    mine = tokens.list_tokens(session, caller, 100, None).items
    assert {t.name for t in mine} >= {"short", "child"} and all(t.user == "admin" for t in mine)
    tokens.revoke_token(session, caller, child.id)
    fails(404, tokens.revoke_token, session, caller, child.id)
    fails(404, tokens.revoke_token, session, caller, 2**63)
