"""API tokens: minting, listing and revoking.

A token carries a scope fixed when it is minted (see :class:`gpuaas.store.tables.Token`): a
token a tenant-admin mints for a member carries that membership only, with the member's role then
as its ceiling, and answers for that tenant only; a personal token (:func:`create_token`) carries
what the token that mints it carries, no more; a token the provider mints for a user
(:func:`create_user_token`) carries what the user has at that moment. No token expires after the
token that minted it. Listing never shows a secret (only the one answer that mints it does), and a
token minted in a tenant sees only the caller's tokens of that tenant, so it cannot learn of the
user's other tenants.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Select, and_, select
from sqlalchemy.orm import Session

from gpuaas.service.auth import (
    Need,
    Principal,
    mint_token,
    require_platform,
    scope_of,
    tenant_for,
    user_scope,
)
from gpuaas.service.errors import conflict, invalid, not_found
from gpuaas.service.identity.members import member_of
from gpuaas.service.identity.rows import (
    MAX_ID,
    commit_here,
    tenant_names,
    user_by_name,
    user_names,
)
from gpuaas.service.models.common import Page, paginate
from gpuaas.service.models.identity import TokenCreated, TokenIn, TokenOut
from gpuaas.store.tables import Tenant, Token, User


def _token_out(token: Token, user: str, tenant: str | None) -> TokenOut:
    return TokenOut(
        id=token.id,
        name=token.name,
        user=user,
        tenant=tenant,
        fingerprint=token.prefix,
        created_at=token.created_at,
        expires_at=token.expires_at,
    )


def _tokens_page(
    session: Session, stmt: Select[tuple[Token]], limit: int, after: str | None
) -> Page[TokenOut]:
    rows, cursor = paginate(session, stmt.where(Token.revoked.is_(False)), Token.id, limit, after)
    users = user_names(session, {t.user_id for t in rows})
    tenants = tenant_names(session, {t.tenant_id for t in rows if t.tenant_id is not None})
    items = [
        _token_out(t, users[t.user_id], None if t.tenant_id is None else tenants[t.tenant_id])
        for t in rows
    ]
    return Page(items=items, next=cursor)


def _expiry(p: Principal, body: TokenIn, now: float) -> float | None:
    """When a token minted by ``p`` expires: as asked, never after ``p``'s own token."""
    asked = None if body.expires_in is None else now + body.expires_in
    if p.expires_at is None:
        return asked
    if asked is None:
        return p.expires_at
    if asked > p.expires_at:
        left = max(0, int(p.expires_at - now))
        raise invalid(
            "expiresIn",
            f"a token cannot outlive the token that mints it, which expires in {left} s; "
            f"ask for at most {left}",
        )
    return asked


def _issue(
    session: Session,
    p: Principal,
    user: User,
    body: TokenIn,
    scope: dict[str, str],
    tenant: Tenant | None,
) -> TokenCreated:
    now = time.time()
    tenant_id = None if tenant is None else tenant.id
    expires_at = _expiry(p, body, now)
    token, secret = mint_token(
        session, user.id, body.name, scope, now, tenant_id=tenant_id, expires_at=expires_at
    )
    out = _token_out(token, user.name, None if tenant is None else tenant.name)
    commit_here(session)
    return TokenCreated(**out.model_dump(), token=secret)


def _own_tokens(p: Principal) -> Any:
    """The caller's tokens it may see: all of them with a personal token, those minted in the
    same tenant with a token minted in a tenant (it must not learn of the user's other tenants)."""
    cond = Token.user_id == p.user_id
    if p.tenant_id is not None:
        cond = and_(cond, Token.tenant_id == p.tenant_id)
    return cond


def create_member_token(
    session: Session, p: Principal, tenant: str, user: str, body: TokenIn
) -> TokenCreated:
    """A token for a member of the tenant, for this tenant only, with the member's role now as
    its ceiling (tenant-admins)."""
    row, account, member = member_of(session, p, tenant, user)
    return _issue(session, p, account, body, scope_of([member]), row)


def list_tokens(
    session: Session, p: Principal, limit: int, after: str | None, every_user: bool = False
) -> Page[TokenOut]:
    """The caller's own live tokens; with ``every_user`` everyone's (platform roles)."""
    if every_user:
        require_platform(p, write=False)
        return _tokens_page(session, select(Token), limit, after)
    return _tokens_page(session, select(Token).where(_own_tokens(p)), limit, after)


def create_token(session: Session, p: Principal, body: TokenIn) -> TokenCreated:
    """A token for the caller carrying what the calling token carries (its tenant too, if it
    was minted in one), expiring no later than it."""
    user = session.get(User, p.user_id)
    if user is None:
        raise not_found(f"user {p.user}")
    scope = {str(m): str(role) for m, role in p.grants.items()}
    tenant = None if p.tenant_id is None else session.get(Tenant, p.tenant_id)
    return _issue(session, p, user, body, scope, tenant)


def list_user_tokens(
    session: Session, p: Principal, user: str, limit: int, after: str | None
) -> Page[TokenOut]:
    """A user's live tokens: any user's for platform roles, one's own for everyone."""
    if user == p.user:
        return list_tokens(session, p, limit, after)
    require_platform(p, write=False)
    account = user_by_name(session, user)
    return _tokens_page(session, select(Token).where(Token.user_id == account.id), limit, after)


def create_user_token(session: Session, p: Principal, user: str, body: TokenIn) -> TokenCreated:
    """A provider-admin gives a user a personal token carrying the user's roles now (platform
    and tenants); it never carries a role the user gains later. 409 for a disabled user."""
    require_platform(p, write=True)
    account = user_by_name(session, user)
    if account.disabled:
        raise conflict(f"user {user} is disabled; enable it first")
    return _issue(session, p, account, body, user_scope(session, account.id), None)


def revoke_token(session: Session, p: Principal, token_id: int) -> None:
    """Revoke one of the caller's tokens (a provider-admin may revoke any); another's token, a
    revoked one or one the caller's tenant token may not see is 404."""
    token = session.get(Token, token_id) if 0 < token_id <= MAX_ID else None
    mine = token is not None and (
        token.user_id == p.user_id and (p.tenant_id is None or token.tenant_id == p.tenant_id)
    )
    if token is None or token.revoked or not (mine or p.is_provider_admin):
        raise not_found(f"token {token_id}")
    token.revoked = True
    commit_here(session)


def list_tenant_tokens(
    session: Session, p: Principal, tenant: str, limit: int, after: str | None
) -> Page[TokenOut]:
    """The live tokens minted in the tenant (for its tenant-admins and the provider)."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    return _tokens_page(session, select(Token).where(Token.tenant_id == row.id), limit, after)


def revoke_tenant_token(session: Session, p: Principal, tenant: str, token_id: int) -> None:
    """Revoke a token minted in the tenant (tenant-admins)."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    token = session.get(Token, token_id) if 0 < token_id <= MAX_ID else None
    if token is None or token.revoked or token.tenant_id != row.id:
        raise not_found(f"token {token_id} of tenant {tenant}")
    token.revoked = True
    commit_here(session)
