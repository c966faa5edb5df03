"""Users and their platform roles, and who the caller is.

Provider-admins create, change, disable and delete users; platform viewers read them; everyone
reads itself. A platform role is a membership without a tenant (``provider-admin`` or
``viewer``). The platform always keeps one enabled provider-admin: demoting, disabling or
deleting the last one is refused (409), since nobody could administer afterwards. A user with
jobs is not deleted (their history would go with it); it is disabled instead, and a disabled
user's tokens are refused on the next request.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuaas.service.auth import PLATFORM_ROLES, Principal, Role, require_platform
from gpuaas.service.errors import conflict, invalid
from gpuaas.service.fleet import text_cursor
from gpuaas.service.identity.rows import commit_here, tenant_names, user_by_name
from gpuaas.service.models.common import Page, paginate
from gpuaas.service.models.identity import (
    TenantRole,
    UserIn,
    UserOut,
    UserPatch,
    WhoAmI,
    user_name_problem,
)
from gpuaas.store.tables import Job, Membership, User


def whoami(session: Session, p: Principal) -> WhoAmI:
    """The caller's user name, platform role and tenant roles (those its token carries)."""
    names = tenant_names(session, p.tenant_roles)
    tenants = [
        TenantRole(tenant=names[tid], role=str(role))
        for tid, role in sorted(p.tenant_roles.items())
        if tid in names
    ]
    role = None if p.platform_role is None else str(p.platform_role)
    return WhoAmI(user=p.user, platform_role=role, tenants=tenants)


def check_user_name(field: str, name: str) -> str:
    """``name`` if it is a valid user name, else 422 naming ``field``."""
    problem = user_name_problem(name)
    if problem:
        raise invalid(field, problem)
    return name


def platform_roles(session: Session, user_ids: Iterable[int]) -> dict[int, str]:
    """``{user id: platform role}`` of those of ``user_ids`` that have one."""
    rows = session.execute(
        select(Membership.user_id, Membership.role).where(
            Membership.user_id.in_(list(user_ids)), Membership.tenant_id.is_(None)
        )
    )
    return dict(rows.all())


def user_out(user: User, roles: Mapping[int, str]) -> UserOut:
    return UserOut(
        name=user.name,
        display_name=user.display_name,
        platform_role=roles.get(user.id),
        disabled=user.disabled,
        created_at=user.created_at,
    )


def _platform_role(value: str | None) -> Role | None:
    if value is None:
        return None
    allowed = [str(r) for r in PLATFORM_ROLES]
    if value not in allowed:
        raise invalid("platformRole", f"must be one of {', '.join(allowed)}, got {value!r}")
    return Role(value)


def _set_platform_role(session: Session, user: User, role: Role | None, now: float) -> None:
    current = session.scalar(
        select(Membership).where(Membership.user_id == user.id, Membership.tenant_id.is_(None))
    )
    if current is not None and current.role == Role.PROVIDER_ADMIN and role != current.role:
        _keep_a_provider_admin(session, user)
    if role is None:
        if current is not None:
            session.delete(current)
    elif current is None:
        session.add(Membership(user_id=user.id, tenant_id=None, role=str(role), created_at=now))
    else:
        current.role = str(role)


def _keep_a_provider_admin(session: Session, leaving: User) -> None:
    """409 when ``leaving`` is the last enabled provider admin: nobody could administer."""
    others = session.scalar(
        select(func.count(Membership.id))
        .join(User, User.id == Membership.user_id)
        .where(
            Membership.tenant_id.is_(None),
            Membership.role == str(Role.PROVIDER_ADMIN),
            Membership.user_id != leaving.id,
            User.disabled.is_(False),
        )
    )
    if not others:
        raise conflict(f"{leaving.name} is the last provider-admin; make another one first")


def list_users(session: Session, p: Principal, limit: int, after: str | None) -> Page[UserOut]:
    require_platform(p, write=False)
    rows, cursor = paginate(session, select(User), User.name, limit, text_cursor(after))
    roles = platform_roles(session, [u.id for u in rows])
    return Page(items=[user_out(u, roles) for u in rows], next=cursor)


def create_user(session: Session, p: Principal, body: UserIn) -> UserOut:
    require_platform(p, write=True)
    role = _platform_role(body.platform_role)
    if session.scalar(select(User.id).where(User.name == body.name)) is not None:
        raise conflict(f"user {body.name} already exists", "name")
    now = time.time()
    user = User(name=body.name, display_name=body.display_name, created_at=now)
    session.add(user)
    session.flush()
    _set_platform_role(session, user, role, now)
    session.flush()
    return user_out(user, platform_roles(session, [user.id]))


def get_user(session: Session, p: Principal, name: str) -> UserOut:
    """Platform roles read any user; everyone reads itself."""
    if name != p.user:
        require_platform(p, write=False)
    row = user_by_name(session, name)
    return user_out(row, platform_roles(session, [row.id]))


def update_user(session: Session, p: Principal, name: str, body: UserPatch) -> UserOut:
    require_platform(p, write=True)
    row = user_by_name(session, name)
    if body.display_name is not None:
        row.display_name = body.display_name
    if "platform_role" in body.model_fields_set:
        _set_platform_role(session, row, _platform_role(body.platform_role), time.time())
    if body.disabled is not None:
        if body.disabled and not row.disabled:
            roles = platform_roles(session, [row.id])
            if roles.get(row.id) == Role.PROVIDER_ADMIN:
                _keep_a_provider_admin(session, row)
        row.disabled = body.disabled
    commit_here(session)
    return user_out(row, platform_roles(session, [row.id]))


def delete_user(session: Session, p: Principal, name: str) -> None:
    """Delete a user with its tokens and memberships; 409 when it has jobs (disable it
    instead) or is the last enabled provider-admin."""
    require_platform(p, write=True)
    row = user_by_name(session, name)
    if platform_roles(session, [row.id]).get(row.id) == Role.PROVIDER_ADMIN:
        _keep_a_provider_admin(session, row)
    if session.scalar(select(Job.id).where(Job.user_id == row.id).limit(1)) is not None:
        raise conflict(f"user {name} has jobs; disable it instead (PATCH disabled: true)")
    session.delete(row)
    commit_here(session)
