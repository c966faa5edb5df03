"""Who is calling and what they may do.

Roles: ``provider-admin`` and ``viewer`` platform-wide (a membership without a tenant), and
``tenant-admin``, ``tenant-user`` and ``viewer`` within one tenant. A tenant a caller is not a
member of does not exist for them: every route answers 404, never 403, and shows nothing.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field
from enum import StrEnum

from sqlalchemy import select
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


@dataclass(frozen=True, slots=True)
class Principal:
    user_id: int
    user: str
    platform_role: Role | None = None
    tenant_roles: dict[int, Role] = field(default_factory=dict, hash=False)

    @property
    def is_provider_admin(self) -> bool:
        return self.platform_role is Role.PROVIDER_ADMIN

    @property
    def sees_everything(self) -> bool:
        return self.platform_role is not None

    def role_in(self, tenant_id: int) -> Role | None:
        return self.tenant_roles.get(tenant_id)


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenCache:
    """Token hash -> principal for a few seconds: authentication then costs no query.

    Any write to tokens or memberships clears it, so a revocation takes effect at once in this
    process (and within ``ttl`` seconds in other replicas).
    """

    def __init__(self, ttl: float = 5.0) -> None:
        self.ttl = ttl
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._lock = threading.Lock()

    def get(self, digest: str) -> Principal | None:
        entry = self._entries.get(digest)
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def put(self, digest: str, principal: Principal) -> None:
        with self._lock:
            if len(self._entries) > 10_000:
                self._entries.clear()
            self._entries[digest] = (time.monotonic() + self.ttl, principal)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def load_principal(session: Session, token: str, now: float) -> Principal | None:
    """The principal a token stands for, or None (unknown, revoked, expired, user disabled)."""
    row = session.execute(
        select(Token, User)
        .join(User, User.id == Token.user_id)
        .where(Token.token_hash == hash_token(token))
    ).first()
    if row is None:
        return None
    tok, user = row
    if tok.revoked or user.disabled or (tok.expires_at is not None and tok.expires_at <= now):
        return None
    return principal_of(session, user)


def principal_of(session: Session, user: User) -> Principal:
    platform: Role | None = None
    tenants: dict[int, Role] = {}
    for m in session.scalars(select(Membership).where(Membership.user_id == user.id)):
        if m.tenant_id is None:
            platform = Role(m.role)
        else:
            tenants[m.tenant_id] = Role(m.role)
    return Principal(user.id, user.name, platform, tenants)


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


def bootstrap_admin(session: Session, token: str | None, now: float) -> str | None:
    """On the very first start, create the provider admin; return its token (None later).

    ``token`` (``GPUAAS_ADMIN_TOKEN``) is used instead of a random one when given.
    """
    if session.get(Meta, "bootstrapped") is not None:
        return None
    if token is not None and len(token) < 16:
        raise ApiError(500, "GPUAAS_ADMIN_TOKEN must be at least 16 characters")
    user = session.scalar(select(User).where(User.name == "admin"))
    if user is None:
        user = User(name="admin", display_name="Provider administrator", created_at=now)
        session.add(user)
        session.flush()
        session.add(
            Membership(
                user_id=user.id, tenant_id=None, role=Role.PROVIDER_ADMIN.value, created_at=now
            )
        )
    secret = token or new_token()
    session.add(
        Token(
            user_id=user.id,
            name="bootstrap",
            prefix=secret[:8],
            token_hash=hash_token(secret),
            created_at=now,
        )
    )
    session.add(Meta(key="bootstrapped", value=str(now)))
    return secret
