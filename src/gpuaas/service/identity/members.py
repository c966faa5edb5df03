"""A tenant's members, and the invitations of users that exist already.

A tenant-admin (or a provider-admin) gives a user a role in the tenant. A user name that does
not exist yet is created with the role; a user that exists already and is not a member is only
*invited* (its consent is needed): it becomes a member when it accepts with a token of its own
(a token minted in a tenant is that tenant's, not the user's consent) or when a provider-admin
accepts for it; a provider-admin's own ``put_member`` adds it at once. Lowering a member's role
lowers what every token carrying the membership may do; raising it never raises a token minted
before (a token keeps the role it was minted with as its ceiling). Removing a member revokes the
tokens minted for it in the tenant.
"""

from __future__ import annotations

import time

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gpuaas.service.auth import TENANT_ROLES, Need, Principal, Role, authorize, tenant_for
from gpuaas.service.errors import forbidden, invalid, not_found
from gpuaas.service.identity.rows import (
    commit_here,
    find_user,
    invitation,
    membership,
    tenant_by_name,
    tenant_names,
    user_names,
)
from gpuaas.service.identity.users import check_user_name
from gpuaas.service.models.common import Page, paginate
from gpuaas.service.models.identity import InvitationOut, MemberOut
from gpuaas.store.tables import Invitation, Membership, Tenant, Token, User

#: ``MemberOut.status`` of a user invited rather than added (the API answers 202).
INVITED = "invited"


def _tenant_role(value: str) -> Role:
    allowed = [str(r) for r in TENANT_ROLES]
    if value not in allowed:
        raise invalid("role", f"must be one of {', '.join(allowed)}, got {value!r}")
    return Role(value)


def list_members(
    session: Session, p: Principal, tenant: str, limit: int, after: str | None
) -> Page[MemberOut]:
    row = tenant_for(session, p, tenant, Need.READ)
    stmt = select(Membership).where(Membership.tenant_id == row.id)
    members, cursor = paginate(session, stmt, Membership.id, limit, after)
    names = user_names(session, [m.user_id for m in members])
    items = [
        MemberOut(user=names[m.user_id], role=m.role, created_at=m.created_at) for m in members
    ]
    return Page(items=items, next=cursor)


def put_member(session: Session, p: Principal, tenant: str, user: str, role: str) -> MemberOut:
    """Give ``user`` ``role`` in ``tenant``: a member at once (a new user name, an existing
    member, or a provider-admin asking), else an invitation (``status`` :data:`INVITED`)."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    wanted = _tenant_role(role)
    now = time.time()
    account = find_user(session, user)
    existed = account is not None
    if account is None:
        account = User(name=check_user_name("user", user), created_at=now)
        session.add(account)
        session.flush()
    member = membership(session, row, account)
    invited = invitation(session, row, account)
    if member is None and existed and not p.is_provider_admin:
        if invited is None:
            invited = Invitation(
                tenant_id=row.id, user_id=account.id, invited_by=p.user, created_at=now
            )
            session.add(invited)
        invited.role = str(wanted)
        commit_here(session)
        return MemberOut(
            user=account.name, role=invited.role, created_at=invited.created_at, status=INVITED
        )
    if invited is not None:
        session.delete(invited)
    if member is None:
        member = Membership(user_id=account.id, tenant_id=row.id, role=str(wanted), created_at=now)
        session.add(member)
    else:
        member.role = str(wanted)
    commit_here(session)
    return MemberOut(user=account.name, role=member.role, created_at=member.created_at)


def member_of(
    session: Session, p: Principal, tenant: str, user: str
) -> tuple[Tenant, User, Membership]:
    """``tenant``, its member ``user`` and the membership, if ``p`` administers the tenant;
    else 404 (or 403 for a member without the role)."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    account = find_user(session, user)
    member = None if account is None else membership(session, row, account)
    if member is None or account is None:
        raise not_found(f"member {user} of tenant {tenant}")
    return row, account, member


def delete_member(session: Session, p: Principal, tenant: str, user: str) -> None:
    """Remove a member and revoke the tokens minted for it in this tenant; no token of the
    user answers for this tenant any more (a later membership is a new one)."""
    row, account, member = member_of(session, p, tenant, user)
    session.execute(
        update(Token)
        .where(Token.tenant_id == row.id, Token.user_id == account.id)
        .values(revoked=True)
    )
    session.delete(member)
    commit_here(session)


# --- invitations ---------------------------------------------------------------------------


def _invitation_out(inv: Invitation, tenant: str, user: str) -> InvitationOut:
    return InvitationOut(
        tenant=tenant,
        user=user,
        role=inv.role,
        invited_by=inv.invited_by,
        created_at=inv.created_at,
    )


def list_my_invitations(
    session: Session, p: Principal, limit: int, after: str | None
) -> Page[InvitationOut]:
    """The caller's pending invitations."""
    stmt = select(Invitation).where(Invitation.user_id == p.user_id)
    rows, cursor = paginate(session, stmt, Invitation.id, limit, after)
    names = tenant_names(session, [i.tenant_id for i in rows])
    return Page(items=[_invitation_out(i, names[i.tenant_id], p.user) for i in rows], next=cursor)


def list_invitations(
    session: Session, p: Principal, tenant: str, limit: int, after: str | None
) -> Page[InvitationOut]:
    """The tenant's pending invitations (for those who may read the tenant)."""
    row = tenant_for(session, p, tenant, Need.READ)
    stmt = select(Invitation).where(Invitation.tenant_id == row.id)
    rows, cursor = paginate(session, stmt, Invitation.id, limit, after)
    names = user_names(session, [i.user_id for i in rows])
    return Page(items=[_invitation_out(i, row.name, names[i.user_id]) for i in rows], next=cursor)


def _pending(
    session: Session, p: Principal, tenant: str, user: str, need: Need
) -> tuple[Tenant, User, Invitation]:
    """The invitation of ``user`` to ``tenant``, if ``p`` may act on it: the invited user itself
    (with a personal token: a token minted in a tenant is that tenant's, not the user's
    consent), a provider-admin, or else a member of the tenant with ``need``."""
    found = tenant_by_name(session, tenant)
    account = find_user(session, user)
    pending = None if account is None else invitation(session, found, account)
    if pending is not None and account is not None and account.id == p.user_id:
        if not p.is_personal:
            raise forbidden(
                "a token minted in a tenant cannot answer an invitation; use a token of your own"
            )
        return found, account, pending
    if not p.is_provider_admin:
        authorize(p, found.id, found.name, need)
    if pending is None or account is None:
        raise not_found(f"invitation of {user} to tenant {tenant}")
    return found, account, pending


def accept_invitation(session: Session, p: Principal, tenant: str, user: str) -> MemberOut:
    """The invited user (or a provider-admin) accepts: the user becomes a member with the
    invited role. Its tokens do not gain the membership; a token for it is minted anew."""
    row, account, pending = _pending(session, p, tenant, user, Need.ADMIN)
    if not (p.is_provider_admin or account.id == p.user_id):
        raise forbidden("only the invited user or a provider-admin may accept an invitation")
    now = time.time()
    member = membership(session, row, account)
    if member is None:
        member = Membership(user_id=account.id, tenant_id=row.id, role=pending.role, created_at=now)
        session.add(member)
    else:
        member.role = pending.role
    session.delete(pending)
    commit_here(session)
    return MemberOut(user=account.name, role=member.role, created_at=member.created_at)


def delete_invitation(session: Session, p: Principal, tenant: str, user: str) -> None:
    """Withdraw an invitation (a tenant-admin) or decline it (the invited user)."""
    _, _, pending = _pending(session, p, tenant, user, Need.ADMIN)
    session.delete(pending)
    commit_here(session)
