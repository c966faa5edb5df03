"""Who is calling and what they may do.

Roles: ``provider-admin`` and ``viewer`` platform-wide (a membership without a tenant), and
``tenant-admin``, ``tenant-user`` and ``viewer`` within one tenant. A tenant a caller is not a
member of does not exist for them: every route answers 404, never 403, and shows nothing.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sqlalchemy import Connection, select, text
from sqlalchemy.orm import Session

from gpuaas.service.errors import ApiError, forbidden, not_found
from gpuaas.store.tables import Membership, Meta, Tenant, Token, User

TOKEN_PREFIX = "gpa_"


class Role(StrEnum):
    PROVIDER_ADMIN = "provider-admin"
    TENANT_ADMIN = "tenant-admin"
    TENANT_USER = "tenant-user"
    VIEWER = "viewer"


PLATFORM_ROLES = (Role.PROVIDER_ADMIN, Role.VIEWER)
TENANT_ROLES = (Role.TENANT_ADMIN, Role.TENANT_USER, Role.VIEWER)


class Need(StrEnum):
    """What a route does in a tenant: read it, submit work to it, or administer it."""

    READ = "read"
    SUBMIT = "submit"
    ADMIN = "admin"


_ALLOWED: dict[Role, frozenset[Need]] = {
    Role.TENANT_ADMIN: frozenset(Need),
    Role.TENANT_USER: frozenset({Need.READ, Need.SUBMIT}),
    Role.VIEWER: frozenset({Need.READ}),
}


#: Roles from least to most: a token's scope caps a membership's role at its own.
_RANK = {Role.VIEWER: 0, Role.TENANT_USER: 1, Role.TENANT_ADMIN: 2, Role.PROVIDER_ADMIN: 3}


def lower_role(a: Role, b: Role) -> Role:
    """The lesser of two roles of the same membership."""
    return a if _RANK[a] <= _RANK[b] else b


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling, as the token allows: the roles of the memberships in the token's scope
    that still exist, each capped at the role the token was minted with.

    ``grants`` (membership id -> that capped role) is what a token minted by this one may carry;
    ``tenant_id`` is set when the token was minted in a tenant (it answers for that tenant only).
    """

    user_id: int
    user: str
    platform_role: Role | None = None
    tenant_roles: dict[int, Role] = field(default_factory=dict, hash=False)
    token_id: int = 0
    expires_at: float | None = None
    tenant_id: int | None = None
    grants: dict[int, Role] = field(default_factory=dict, hash=False)

    @property
    def is_provider_admin(self) -> bool:
        return self.platform_role is Role.PROVIDER_ADMIN

    @property
    def sees_everything(self) -> bool:
        return self.platform_role is not None

    @property
    def is_personal(self) -> bool:
        """A token of the user's own (not one a tenant-admin minted in a tenant)."""
        return self.tenant_id is None

    def role_in(self, tenant_id: int) -> Role | None:
        return self.tenant_roles.get(tenant_id)


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def fingerprint(token: str) -> str:
    """What a listing shows to tell tokens apart: the first 8 hex digits of the token's
    SHA-256, never any character of the token itself (an operator-chosen admin token of 16
    characters once had half of it stored and listed)."""
    return hash_token(token)[:8]


#: The one query authentication costs. One row per membership of the token's user (one row with
#: NULLs when it has none).
_PRINCIPAL_SQL = (
    "SELECT t.id, t.user_id, t.tenant_id, t.scope, t.expires_at, t.revoked, u.name, u.disabled,"
    " m.id, m.tenant_id, m.role"
    " FROM tokens t JOIN users u ON u.id = t.user_id"
    " LEFT OUTER JOIN memberships m ON m.user_id = t.user_id"
    " WHERE t.token_hash = {digest}"
)
#: The query in each driver's own parameter style, run on the driver's cursor: every request pays
#: for it, and SQLAlchemy's statement and result layers cost ten times the query itself (about
#: 120 us against 10 us of CPU on SQLite).
_DRIVER_SQL = {
    "qmark": _PRINCIPAL_SQL.format(digest="?"),
    "format": _PRINCIPAL_SQL.format(digest="%s"),
    "pyformat": _PRINCIPAL_SQL.format(digest="%s"),
}
_PORTABLE_SQL = text(_PRINCIPAL_SQL.format(digest=":digest"))


def _principal_rows(db: Connection | Session, digest: str) -> list[Any]:
    connection = db.connection() if isinstance(db, Session) else db
    sql = _DRIVER_SQL.get(connection.dialect.paramstyle)
    if sql is None:
        return list(connection.execute(_PORTABLE_SQL, {"digest": digest}).all())
    cursor = connection.connection.cursor()
    try:
        cursor.execute(sql, (digest,))
        return list(cursor.fetchall())
    finally:
        cursor.close()


def load_principal(db: Connection | Session, token: str, now: float) -> Principal | None:
    """The principal a token stands for, or None (unknown, revoked, expired, user disabled, or
    minted in a tenant the user has left).

    One indexed query; requests go through :mod:`gpuaas.service.principal_cache`, which keeps a
    valid answer for at most 1 s and empties on every identity change this process commits.
    """
    rows = _principal_rows(db, hash_token(token))
    if not rows:
        return None
    token_id, user_id, bound, scope, expires_at, revoked, name, disabled = rows[0][:8]
    if revoked or disabled or (expires_at is not None and expires_at <= now):
        return None
    if isinstance(scope, str):  # SQLite hands JSON back as text
        scope = json.loads(scope)
    platform: Role | None = None
    tenants: dict[int, Role] = {}
    grants: dict[int, Role] = {}
    for *_, membership_id, tenant_id, role in rows:
        cap = None if membership_id is None else (scope or {}).get(str(membership_id))
        if cap is None:
            continue
        effective = lower_role(Role(cap), Role(role))
        grants[membership_id] = effective
        if tenant_id is None:
            platform = effective
        else:
            tenants[tenant_id] = effective
    if bound is not None and bound not in tenants:
        return None  # minted in a tenant the user is no longer a member of
    return Principal(user_id, name, platform, tenants, token_id, expires_at, bound, grants)


def scope_of(memberships: Iterable[Membership]) -> dict[str, str]:
    """A token scope granting exactly these memberships' current roles."""
    return {str(m.id): m.role for m in memberships}


def user_scope(session: Session, user_id: int) -> dict[str, str]:
    """Everything ``user_id`` has now, as a token scope (the bootstrap and migrated tokens)."""
    return scope_of(session.scalars(select(Membership).where(Membership.user_id == user_id)))


def mint_token(
    session: Session,
    user_id: int,
    name: str,
    scope: dict[str, str],
    now: float,
    *,
    tenant_id: int | None = None,
    expires_at: float | None = None,
    secret: str | None = None,
) -> tuple[Token, str]:
    """Store a new token (its hash) and return it with its secret, shown once."""
    secret = secret or new_token()
    token = Token(
        user_id=user_id,
        tenant_id=tenant_id,
        scope=scope,
        name=name,
        prefix=fingerprint(secret),
        token_hash=hash_token(secret),
        created_at=now,
        expires_at=expires_at,
        revoked=False,
    )
    session.add(token)
    session.flush()
    return token, secret


def require_platform(p: Principal, write: bool) -> None:
    """Provider routes: provider-admins may write, platform viewers may read."""
    if p.is_provider_admin or (not write and p.platform_role is Role.VIEWER):
        return
    raise forbidden("needs the provider-admin role" if write else "needs a platform-wide role")


def tenant_for(session: Session, p: Principal, name: str, need: Need) -> Tenant:
    """The tenant ``name`` if ``p`` may ``need`` it; 404 when it is not theirs to see."""
    if "\x00" in name:  # no stored name has one (and PostgreSQL refuses it in a query)
        raise not_found(f"tenant {name!r}")
    tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise not_found(f"tenant {name}")
    authorize(p, tenant.id, name, need)
    return tenant


def authorize(p: Principal, tenant_id: int, name: str, need: Need) -> None:
    """Raise 404 (not a member) or 403 (a member without the role) unless ``p`` may ``need``
    tenant ``name``."""
    if p.is_provider_admin:
        return
    role = p.role_in(tenant_id)
    if role is None:
        if p.platform_role is Role.VIEWER:
            if need is Need.READ:
                return
            raise forbidden("the viewer role is read-only")
        raise not_found(f"tenant {name}")
    if need not in _ALLOWED[role]:
        raise forbidden(f"the {role} role may not {_VERB[need]} in tenant {name}")


@dataclass(frozen=True, slots=True)
class TenantRef:
    id: int
    name: str


class TenantCache:
    """Tenant name -> id for a couple of seconds, for the submission hot path (a tenant's id
    never changes; a tenant deleted meanwhile makes the insert fail on its foreign key)."""

    def __init__(self, ttl: float = 2.0) -> None:
        self.ttl = ttl
        self._ids: dict[str, tuple[float, int]] = {}

    def ref_for(self, session: Session, p: Principal, name: str, need: Need) -> TenantRef:
        found = self._ids.get(name)
        if found is not None and found[0] > time.monotonic():
            authorize(p, found[1], name, need)
            return TenantRef(found[1], name)
        tenant = tenant_for(session, p, name, need)
        if len(self._ids) > 10_000:
            self._ids.clear()
        self._ids[name] = (time.monotonic() + self.ttl, tenant.id)
        return TenantRef(tenant.id, tenant.name)


_VERB = {Need.READ: "read", Need.SUBMIT: "submit work", Need.ADMIN: "administer"}


BOOTSTRAP_TOKEN = "bootstrap"


def bootstrap_admin(session: Session, token: str | None, now: float) -> str | None:
    """Until a first start has succeeded, make sure the provider admin exists and give it a new
    token; return that token (None once ``mark_bootstrapped`` has recorded a successful start).

    A start that fails after this (a bad fleet file, a busy port) never shows the token, so the
    next start revokes it and issues another: the token is shown once, by the start that
    succeeds. ``token`` (``GPUAAS_ADMIN_TOKEN``) is used instead of a random one when given.
    """
    if session.get(Meta, "bootstrapped") is not None:
        return None
    if token is not None and len(token) < 16:
        raise ApiError(500, "GPUAAS_ADMIN_TOKEN must be at least 16 characters")
    user = provider_admin_user(session, "admin", now)
    return _replace_tokens(session, user, token, BOOTSTRAP_TOKEN, now, only_bootstrap=True)


def mark_bootstrapped(session: Session, now: float) -> None:
    """Record that the first start succeeded and its admin token was shown."""
    if session.get(Meta, "bootstrapped") is None:
        session.add(Meta(key="bootstrapped", value=str(now)))


def reset_admin_token(session: Session, name: str, now: float) -> str:
    """A new provider-admin token for ``name`` (``gpuaas admin reset-token``): the user is
    created, enabled and made provider-admin as needed, and every token it had is revoked.

    For whoever holds the database when the admin token is lost: no API call can do this.
    """
    user = provider_admin_user(session, name, now)
    user.disabled = False
    secret = _replace_tokens(session, user, None, "admin-reset", now, only_bootstrap=False)
    mark_bootstrapped(session, now)
    return secret


def provider_admin_user(session: Session, name: str, now: float) -> User:
    """The user ``name`` with the provider-admin role (both made when missing)."""
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        user = User(name=name, display_name="Provider administrator", created_at=now)
        session.add(user)
        session.flush()
    platform = session.scalar(
        select(Membership).where(Membership.user_id == user.id, Membership.tenant_id.is_(None))
    )
    if platform is None:
        session.add(
            Membership(
                user_id=user.id, tenant_id=None, role=Role.PROVIDER_ADMIN.value, created_at=now
            )
        )
    else:
        platform.role = Role.PROVIDER_ADMIN.value
    session.flush()
    return user


def _replace_tokens(
    session: Session, user: User, secret: str | None, name: str, now: float, only_bootstrap: bool
) -> str:
    """Revoke the user's tokens (its earlier bootstrap ones only, or all) and mint one new token
    carrying only its platform role; a given ``secret`` already stored is reused."""
    platform = session.scalar(
        select(Membership).where(Membership.user_id == user.id, Membership.tenant_id.is_(None))
    )
    assert platform is not None
    scope = scope_of([platform])
    reused = None
    if secret is not None:
        reused = session.scalar(select(Token).where(Token.token_hash == hash_token(secret)))
        if reused is not None and reused.user_id != user.id:
            raise ApiError(500, "GPUAAS_ADMIN_TOKEN is already another user's token")
    stale = select(Token).where(Token.user_id == user.id, Token.revoked.is_(False))
    if only_bootstrap:
        stale = stale.where(Token.name == BOOTSTRAP_TOKEN)
    for old in session.scalars(stale):
        if old is not reused:
            old.revoked = True
    if reused is not None:
        reused.revoked = False
        reused.scope = scope
        reused.tenant_id = None
        reused.expires_at = None
        session.flush()
        return secret  # type: ignore[return-value]
    _, secret = mint_token(session, user.id, name, scope, now, secret=secret)
    return secret
