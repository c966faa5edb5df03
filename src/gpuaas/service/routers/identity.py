"""Who is who: tenants, users, tenant memberships and API tokens.

Provider admins manage tenants and users; a tenant admin manages the tenant's members (inviting
users that exist already) and can hand a member a token for the tenant. Tokens are checked against
the database on every request (no cache), so a removed member, a disabled user or a revoked token
is refused on the very next request.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import APIRouter, Query, Response
from sqlalchemy import Select, and_, func, select, update
from sqlalchemy.orm import Session

from gpuaas.model.errors import InvalidValue
from gpuaas.model.job_state import UNFINISHED
from gpuaas.model.resources import canonical_amount, format_amount
from gpuaas.service.auth import (
    PLATFORM_ROLES,
    TENANT_ROLES,
    Need,
    Principal,
    Role,
    authorize,
    mint_token,
    require_platform,
    scope_of,
    tenant_for,
    user_scope,
)
from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.errors import conflict, forbidden, invalid, not_found
from gpuaas.service.fleet import bump_version, take_turn_on, text_cursor
from gpuaas.service.governance import (
    COHORT,
    GOVERNANCE_VERSION,
    LOCAL_QUEUE,
    PRIORITY_CLASS,
    all_objects,
    build_governance,
    check_capacity,
    check_name,
    find_object,
    put_objects,
    tenant_queue_documents,
)
from gpuaas.service.models.common import Page, paginate
from gpuaas.service.models.identity import (
    Capacity,
    InvitationOut,
    MemberIn,
    MemberOut,
    TenantIn,
    TenantOut,
    TenantPatch,
    TenantRole,
    TokenCreated,
    TokenIn,
    TokenOut,
    UserIn,
    UserOut,
    UserPatch,
    WhoAmI,
    user_name_problem,
)
from gpuaas.store.tables import Invitation, Job, Membership, Tenant, Token, User

router = APIRouter(prefix="/v1", tags=["identity"])

LimitQ = Query(100, description="page size, 1-1000")
AfterQ = Query(None, description="the `next` cursor of the previous page")


# --- who am I ------------------------------------------------------------------------------


@router.get("/whoami", response_model=WhoAmI)
def whoami(session: SessionDep, p: PrincipalDep) -> WhoAmI:
    """The caller's user name, platform role and tenant roles."""
    names = dict(
        session.execute(select(Tenant.id, Tenant.name).where(Tenant.id.in_(p.tenant_roles))).all()
    )
    tenants = [
        TenantRole(tenant=names[tid], role=str(role))
        for tid, role in sorted(p.tenant_roles.items())
        if tid in names
    ]
    role = None if p.platform_role is None else str(p.platform_role)
    return WhoAmI(user=p.user, platform_role=role, tenants=tenants)


# --- tenants -------------------------------------------------------------------------------


def tenant_out(tenant: Tenant) -> TenantOut:
    return TenantOut(
        name=tenant.name,
        display_name=tenant.display_name,
        capacity=tenant.capacity or {},
        cohort=tenant.name,
        parent_cohort=tenant.parent_cohort,
        borrowing=tenant.borrowing or {},
        lending=tenant.lending or {},
        max_job=tenant.max_job or {},
        priority_ceiling=tenant.priority_ceiling,
        created_at=tenant.created_at,
    )


def parse_capacity(raw: Capacity, field: str = "capacity") -> dict[str, dict[str, str]]:
    """Capacity with every quantity checked and written canonically (``"64"``, ``"2Ti"``)."""
    out: dict[str, dict[str, str]] = {}
    for flavor, resources in raw.items():
        check_name(f"{field}.{flavor}", flavor)
        out[flavor] = parse_limits(resources, f"{field}.{flavor}")
    return out


def parse_limits(raw: Mapping[str, str | int], field: str) -> dict[str, str]:
    """``{resource: quantity}`` checked and written canonically."""
    out: dict[str, str] = {}
    for resource, value in raw.items():
        where = f"{field}.{resource}"
        try:
            amount = canonical_amount(resource, value, where)
        except InvalidValue as exc:
            raise invalid(where, exc.problem) from None
        out[resource] = format_amount(resource, amount)
    return out


def _set_terms(session: Session, tenant: Tenant, body: TenantIn | TenantPatch) -> None:
    """Apply the provider's terms in ``body`` (those it sets) to ``tenant``, then derive its
    root cohort again; borrowing and lending need a parent cohort and name granted flavors."""
    given = body.model_fields_set
    if "capacity" in given and body.capacity is not None:
        capacity = parse_capacity(body.capacity)
        check_capacity(tenant, tenant_queue_documents(session, tenant), capacity, "capacity")
        tenant.capacity = capacity
    if "parent_cohort" in given:
        if body.parent_cohort is not None:
            check_name("parentCohort", body.parent_cohort)
        tenant.parent_cohort = body.parent_cohort
    for attr, field in (("borrowing", "borrowing"), ("lending", "lending")):
        value = getattr(body, attr)
        if attr in given and value is not None:
            setattr(tenant, attr, parse_capacity(value, field))
    if "max_job" in given and body.max_job is not None:
        tenant.max_job = parse_limits(body.max_job, "maxJob")
    if "priority_ceiling" in given:
        tenant.priority_ceiling = body.priority_ceiling
    for attr in ("borrowing", "lending"):
        terms = getattr(tenant, attr) or {}
        if terms and tenant.parent_cohort is None:
            raise invalid(
                attr, "needs a parentCohort (a tenant without one neither borrows nor lends)"
            )
        for flavor in terms:
            if flavor not in (tenant.capacity or {}):
                raise invalid(
                    f"{attr}.{flavor}",
                    f"flavor {flavor} is not in the tenant's capacity (grant it first, even 0)",
                )
    session.flush()
    put_objects(session, [], time.time(), by_provider=True, tenants=[tenant.id])


MAX_ID = 2**63 - 1


def id_cursor(after: str | None) -> str | None:
    """An ``?after=`` id cursor that fits the database's 64-bit ids (else 422 naming it)."""
    if after is not None and after.strip().lstrip("+-").isdigit() and abs(int(after)) > MAX_ID:
        raise invalid("after", f"not a cursor this list returned: {after!r}")
    return after


def _find_user(session: Session, name: str) -> User | None:
    if "\x00" in name:
        return None  # no stored name has one, and PostgreSQL refuses it in a query
    return session.scalar(select(User).where(User.name == name))


def _tenant_by_name(session: Session, name: str) -> Tenant:
    tenant = None
    if "\x00" not in name:
        tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise not_found(f"tenant {name}")
    return tenant


@router.get("/tenants", response_model=Page[TenantOut])
def list_tenants(
    session: SessionDep, p: PrincipalDep, limit: int = LimitQ, after: str | None = AfterQ
) -> Page[TenantOut]:
    """Every tenant for platform roles; a tenant member sees its own tenants."""
    stmt = select(Tenant)
    if not p.sees_everything:
        stmt = stmt.where(Tenant.id.in_(list(p.tenant_roles)))
    rows, cursor = paginate(session, stmt, Tenant.name, limit, text_cursor(after))
    return Page(items=[tenant_out(t) for t in rows], next=cursor)


@router.post("/tenants", response_model=TenantOut, status_code=201)
def create_tenant(body: TenantIn, session: SessionDep, p: PrincipalDep) -> TenantOut:
    require_platform(p, write=True)
    if session.scalar(select(Tenant.id).where(Tenant.name == body.name)) is not None:
        raise conflict(f"tenant {body.name} already exists", "name")
    take_turn_on(session, GOVERNANCE_VERSION)
    if find_object(session, COHORT, body.name) is not None:
        raise conflict(
            f"a Cohort named {body.name} exists; a tenant's root cohort takes the tenant's name",
            "name",
        )
    tenant = Tenant(name=body.name, display_name=body.display_name, created_at=time.time())
    session.add(tenant)
    session.flush()
    _set_terms(session, tenant, body)
    return tenant_out(tenant)


@router.get("/tenants/{tenant}", response_model=TenantOut)
def get_tenant(tenant: str, session: SessionDep, p: PrincipalDep) -> TenantOut:
    return tenant_out(tenant_for(session, p, tenant, Need.READ))


@router.patch("/tenants/{tenant}", response_model=TenantOut)
def update_tenant(
    tenant: str, body: TenantPatch, session: SessionDep, p: PrincipalDep
) -> TenantOut:
    """Rename for display or change the provider's terms; capacity cannot drop below the
    nominal quota of the tenant's own ClusterQueues and Cohorts (422 naming the flavor and
    resource). The tenant's root cohort follows the terms."""
    require_platform(p, write=True)
    row = _tenant_by_name(session, tenant)
    if body.display_name is not None:
        row.display_name = body.display_name
    if body.model_fields_set - {"display_name"}:
        take_turn_on(session, GOVERNANCE_VERSION)
        _set_terms(session, row, body)
    session.flush()
    return tenant_out(row)


@router.delete("/tenants/{tenant}", status_code=204)
def delete_tenant(tenant: str, session: SessionDep, p: PrincipalDep) -> Response:
    """Delete a tenant with its queues, memberships and finished jobs; 409 while it has
    unfinished jobs or a provider object still needs one of its queues."""
    require_platform(p, write=True)
    take_turn_on(session, GOVERNANCE_VERSION)
    row = _tenant_by_name(session, tenant)
    busy = session.scalar(
        select(func.count(Job.id)).where(Job.tenant_id == row.id, Job.state.in_(UNFINISHED))
    )
    if busy:
        raise conflict(f"tenant {tenant} has {busy} unfinished job(s); cancel them first")
    rows = all_objects(session)
    rest = [
        r.document
        for r in rows
        if r.tenant_id != row.id
        and not (r.kind == LOCAL_QUEUE and r.namespace == row.name)
        and not (r.kind == PRIORITY_CLASS and r.namespace)
    ]
    try:
        build_governance(rest, "governance")
    except InvalidValue as exc:
        raise conflict(f"tenant {tenant} is still referred to: {exc}") from None
    owned = any(r.tenant_id == row.id for r in rows)
    session.delete(row)
    if owned:
        bump_version(session, GOVERNANCE_VERSION)
    commit_here(session)
    return Response(status_code=204)


# --- users ---------------------------------------------------------------------------------


def _check_user_name(field: str, name: str) -> str:
    problem = user_name_problem(name)
    if problem:
        raise invalid(field, problem)
    return name


def _platform_roles(session: Session, user_ids: Iterable[int]) -> dict[int, str]:
    rows = session.execute(
        select(Membership.user_id, Membership.role).where(
            Membership.user_id.in_(list(user_ids)), Membership.tenant_id.is_(None)
        )
    )
    return dict(rows.all())


def _user_out(user: User, roles: Mapping[int, str]) -> UserOut:
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


def _user_by_name(session: Session, name: str) -> User:
    user = _find_user(session, name)
    if user is None:
        raise not_found(f"user {name}")
    return user


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


@router.get("/users", response_model=Page[UserOut])
def list_users(
    session: SessionDep, p: PrincipalDep, limit: int = LimitQ, after: str | None = AfterQ
) -> Page[UserOut]:
    require_platform(p, write=False)
    rows, cursor = paginate(session, select(User), User.name, limit, text_cursor(after))
    roles = _platform_roles(session, [u.id for u in rows])
    return Page(items=[_user_out(u, roles) for u in rows], next=cursor)


@router.post("/users", response_model=UserOut, status_code=201)
def create_user(body: UserIn, session: SessionDep, p: PrincipalDep) -> UserOut:
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
    return _user_out(user, _platform_roles(session, [user.id]))


@router.get("/users/{user}", response_model=UserOut)
def get_user(user: str, session: SessionDep, p: PrincipalDep) -> UserOut:
    """Platform roles read any user; everyone reads itself."""
    if user != p.user:
        require_platform(p, write=False)
    row = _user_by_name(session, user)
    return _user_out(row, _platform_roles(session, [row.id]))


@router.patch("/users/{user}", response_model=UserOut)
def update_user(user: str, body: UserPatch, session: SessionDep, p: PrincipalDep) -> UserOut:
    require_platform(p, write=True)
    row = _user_by_name(session, user)
    if body.display_name is not None:
        row.display_name = body.display_name
    if "platform_role" in body.model_fields_set:
        _set_platform_role(session, row, _platform_role(body.platform_role), time.time())
    if body.disabled is not None:
        if body.disabled and not row.disabled:
            roles = _platform_roles(session, [row.id])
            if roles.get(row.id) == Role.PROVIDER_ADMIN:
                _keep_a_provider_admin(session, row)
        row.disabled = body.disabled
    commit_here(session)
    return _user_out(row, _platform_roles(session, [row.id]))


@router.delete("/users/{user}", status_code=204)
def delete_user(user: str, session: SessionDep, p: PrincipalDep) -> Response:
    """Delete a user with its tokens and memberships; 409 when it has jobs (their history
    would go with it: disable the user instead)."""
    require_platform(p, write=True)
    row = _user_by_name(session, user)
    if _platform_roles(session, [row.id]).get(row.id) == Role.PROVIDER_ADMIN:
        _keep_a_provider_admin(session, row)
    if session.scalar(select(Job.id).where(Job.user_id == row.id).limit(1)) is not None:
        raise conflict(f"user {user} has jobs; disable it instead (PATCH disabled: true)")
    session.delete(row)
    commit_here(session)
    return Response(status_code=204)


# --- memberships ---------------------------------------------------------------------------


@router.get("/tenants/{tenant}/members", response_model=Page[MemberOut])
def list_members(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = AfterQ,
) -> Page[MemberOut]:
    row = tenant_for(session, p, tenant, Need.READ)
    stmt = select(Membership).where(Membership.tenant_id == row.id)
    members, cursor = paginate(session, stmt, Membership.id, limit, id_cursor(after))
    names = _user_names(session, [m.user_id for m in members])
    items = [
        MemberOut(user=names[m.user_id], role=m.role, created_at=m.created_at) for m in members
    ]
    return Page(items=items, next=cursor)


def commit_here(session: Session) -> None:
    """Commit in the route's own worker thread, before returning to the event loop.

    On SQLite the job submission runs its write on the event loop; had this write left its lock
    held until the session dependency commits (a step the event loop schedules), a submission
    arriving meanwhile would wait for a lock whose release waits for it, for the whole busy
    timeout. Identity writes (a revocation above all) must not stall behind submissions.
    """
    session.commit()


def _user_names(session: Session, ids: Iterable[int]) -> dict[int, str]:
    return dict(session.execute(select(User.id, User.name).where(User.id.in_(list(ids)))).all())


def _tenant_role(value: str) -> Role:
    allowed = [str(r) for r in TENANT_ROLES]
    if value not in allowed:
        raise invalid("role", f"must be one of {', '.join(allowed)}, got {value!r}")
    return Role(value)


def _membership(session: Session, tenant: Tenant, user: User) -> Membership | None:
    return session.scalar(
        select(Membership).where(Membership.tenant_id == tenant.id, Membership.user_id == user.id)
    )


def _invitation(session: Session, tenant: Tenant, user: User) -> Invitation | None:
    return session.scalar(
        select(Invitation).where(Invitation.tenant_id == tenant.id, Invitation.user_id == user.id)
    )


@router.put(
    "/tenants/{tenant}/members/{user}",
    response_model=MemberOut,
    responses={202: {"model": MemberOut, "description": "the existing user was invited"}},
)
def put_member(
    tenant: str, user: str, body: MemberIn, response: Response, session: SessionDep, p: PrincipalDep
) -> MemberOut:
    """Give ``user`` a role in the tenant.

    A new user name is created with the role. A user that exists already and is not a member
    is *invited* (202, ``status: invited``): it becomes a member when it accepts (with a token
    of its own) or a provider-admin does; a provider-admin's own PUT adds it at once. Lowering
    a member's role lowers what every token carrying the membership may do; raising it never
    raises a token minted before (a token keeps the role it was minted with as its ceiling).
    """
    row = tenant_for(session, p, tenant, Need.ADMIN)
    role = _tenant_role(body.role)
    now = time.time()
    account = _find_user(session, user)
    existed = account is not None
    if account is None:
        account = User(name=_check_user_name("user", user), created_at=now)
        session.add(account)
        session.flush()
    member = _membership(session, row, account)
    invited = _invitation(session, row, account)
    if member is None and existed and not p.is_provider_admin:
        if invited is None:
            invited = Invitation(
                tenant_id=row.id, user_id=account.id, invited_by=p.user, created_at=now
            )
            session.add(invited)
        invited.role = str(role)
        commit_here(session)
        response.status_code = 202
        return MemberOut(
            user=account.name, role=invited.role, created_at=invited.created_at, status="invited"
        )
    if invited is not None:
        session.delete(invited)
    if member is None:
        member = Membership(user_id=account.id, tenant_id=row.id, role=str(role), created_at=now)
        session.add(member)
    else:
        member.role = str(role)
    commit_here(session)
    return MemberOut(user=account.name, role=member.role, created_at=member.created_at)


@router.delete("/tenants/{tenant}/members/{user}", status_code=204)
def delete_member(tenant: str, user: str, session: SessionDep, p: PrincipalDep) -> Response:
    """Remove a member: the tokens minted for it in this tenant are revoked, and no token of
    the user answers for this tenant any more (a later membership is a new one)."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    account = _find_user(session, user)
    member = None if account is None else _membership(session, row, account)
    if member is None or account is None:
        raise not_found(f"member {user} of tenant {tenant}")
    session.execute(
        update(Token)
        .where(Token.tenant_id == row.id, Token.user_id == account.id)
        .values(revoked=True)
    )
    session.delete(member)
    commit_here(session)
    return Response(status_code=204)


# --- invitations ---------------------------------------------------------------------------


def _invitation_out(inv: Invitation, tenant: str, user: str) -> InvitationOut:
    return InvitationOut(
        tenant=tenant,
        user=user,
        role=inv.role,
        invited_by=inv.invited_by,
        created_at=inv.created_at,
    )


@router.get("/invitations", response_model=Page[InvitationOut])
def list_my_invitations(
    session: SessionDep, p: PrincipalDep, limit: int = LimitQ, after: str | None = AfterQ
) -> Page[InvitationOut]:
    """The caller's pending invitations."""
    stmt = select(Invitation).where(Invitation.user_id == p.user_id)
    rows, cursor = paginate(session, stmt, Invitation.id, limit, id_cursor(after))
    names = dict(
        session.execute(
            select(Tenant.id, Tenant.name).where(Tenant.id.in_([i.tenant_id for i in rows]))
        ).all()
    )
    return Page(items=[_invitation_out(i, names[i.tenant_id], p.user) for i in rows], next=cursor)


@router.get("/tenants/{tenant}/invitations", response_model=Page[InvitationOut])
def list_invitations(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = AfterQ,
) -> Page[InvitationOut]:
    """The tenant's pending invitations."""
    row = tenant_for(session, p, tenant, Need.READ)
    stmt = select(Invitation).where(Invitation.tenant_id == row.id)
    rows, cursor = paginate(session, stmt, Invitation.id, limit, id_cursor(after))
    names = _user_names(session, [i.user_id for i in rows])
    return Page(items=[_invitation_out(i, row.name, names[i.user_id]) for i in rows], next=cursor)


def _pending(
    session: Session, p: Principal, tenant: str, user: str, need: Need
) -> tuple[Tenant, User, Invitation]:
    """The invitation of ``user`` to ``tenant``, if ``p`` may act on it: the invited user itself
    (with a personal token: a token minted in a tenant is that tenant's, not the user's
    consent), a provider-admin, or else a member of the tenant with ``need``."""
    found = _tenant_by_name(session, tenant)
    account = _find_user(session, user)
    invitation = None if account is None else _invitation(session, found, account)
    if invitation is not None and account is not None and account.id == p.user_id:
        if not p.is_personal:
            raise forbidden(
                "a token minted in a tenant cannot answer an invitation; use a token of your own"
            )
        return found, account, invitation
    if not p.is_provider_admin:
        authorize(p, found.id, found.name, need)
    if invitation is None or account is None:
        raise not_found(f"invitation of {user} to tenant {tenant}")
    return found, account, invitation


@router.post("/tenants/{tenant}/invitations/{user}/accept", response_model=MemberOut)
def accept_invitation(tenant: str, user: str, session: SessionDep, p: PrincipalDep) -> MemberOut:
    """The invited user (or a provider-admin) accepts: the user becomes a member with the
    invited role. Its tokens do not gain the membership; a token for it is minted anew."""
    row, account, invitation = _pending(session, p, tenant, user, Need.ADMIN)
    if not (p.is_provider_admin or account.id == p.user_id):
        raise forbidden("only the invited user or a provider-admin may accept an invitation")
    now = time.time()
    member = _membership(session, row, account)
    if member is None:
        member = Membership(
            user_id=account.id, tenant_id=row.id, role=invitation.role, created_at=now
        )
        session.add(member)
    else:
        member.role = invitation.role
    session.delete(invitation)
    commit_here(session)
    return MemberOut(user=account.name, role=member.role, created_at=member.created_at)


@router.delete("/tenants/{tenant}/invitations/{user}", status_code=204)
def delete_invitation(tenant: str, user: str, session: SessionDep, p: PrincipalDep) -> Response:
    """Withdraw an invitation (a tenant-admin) or decline it (the invited user)."""
    _, _, invitation = _pending(session, p, tenant, user, Need.ADMIN)
    session.delete(invitation)
    commit_here(session)
    return Response(status_code=204)


# --- tokens --------------------------------------------------------------------------------
#
# A token carries a scope fixed when it is minted (see ``Token``): a token a tenant-admin mints
# for a member carries that membership only, with the member's role then as its ceiling, and
# answers for that tenant only; a personal token (``POST /v1/tokens``) carries what the token
# that mints it carries, no more; a token the provider mints for a user (``POST
# /v1/users/{u}/tokens``) carries what the user has at that moment. No token expires after the
# token that minted it.


def _token_out(token: Token, user: str, tenant: str | None) -> TokenOut:
    return TokenOut(
        id=token.id,
        name=token.name,
        user=user,
        tenant=tenant,
        prefix=token.prefix,
        created_at=token.created_at,
        expires_at=token.expires_at,
    )


def _tokens_page(
    session: Session, stmt: Select[tuple[Token]], limit: int, after: str | None
) -> Page[TokenOut]:
    rows, cursor = paginate(
        session, stmt.where(Token.revoked.is_(False)), Token.id, limit, id_cursor(after)
    )
    users = _user_names(session, {t.user_id for t in rows})
    ids = {t.tenant_id for t in rows if t.tenant_id is not None}
    tenants = dict(session.execute(select(Tenant.id, Tenant.name).where(Tenant.id.in_(ids))).all())
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


@router.post(
    "/tenants/{tenant}/members/{user}/tokens", response_model=TokenCreated, status_code=201
)
def create_member_token(
    tenant: str, user: str, body: TokenIn, session: SessionDep, p: PrincipalDep
) -> TokenCreated:
    """A token for a member of the tenant, for this tenant only, with the member's role now as
    its ceiling; the secret is in this answer only."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    account = _find_user(session, user)
    member = None if account is None else _membership(session, row, account)
    if member is None or account is None:
        raise not_found(f"member {user} of tenant {tenant}")
    return _issue(session, p, account, body, scope_of([member]), row)


def _may_see_tokens_of(session: Session, p: Principal, user: str) -> User:
    """``user`` if ``p`` may list or revoke its tokens: itself, or any user for a platform
    role (``require_platform`` decides read or write)."""
    if user != p.user:
        require_platform(p, write=False)
    return _user_by_name(session, user)


def _own_tokens(p: Principal) -> Any:
    """The caller's tokens it may see: all of them with a personal token, those minted in the
    same tenant with a token minted in a tenant (it must not learn of the user's other tenants)."""
    cond = Token.user_id == p.user_id
    if p.tenant_id is not None:
        cond = and_(cond, Token.tenant_id == p.tenant_id)
    return cond


@router.get("/tokens", response_model=Page[TokenOut])
def list_tokens(
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = AfterQ,
    every_user: bool = Query(
        False, alias="allUsers", description="every user's live tokens (platform roles)"
    ),
) -> Page[TokenOut]:
    """The caller's own live tokens (never their secrets); with ``allUsers=true`` everyone's."""
    if every_user:
        require_platform(p, write=False)
        return _tokens_page(session, select(Token), limit, after)
    return _tokens_page(session, select(Token).where(_own_tokens(p)), limit, after)


@router.post("/tokens", response_model=TokenCreated, status_code=201)
def create_token(body: TokenIn, session: SessionDep, p: PrincipalDep) -> TokenCreated:
    """A token for the caller carrying what the calling token carries (its tenant too, if it
    was minted in one), expiring no later than it."""
    user = session.get(User, p.user_id)
    if user is None:
        raise not_found(f"user {p.user}")
    scope = {str(m): str(role) for m, role in p.grants.items()}
    tenant = None if p.tenant_id is None else session.get(Tenant, p.tenant_id)
    return _issue(session, p, user, body, scope, tenant)


@router.get("/users/{user}/tokens", response_model=Page[TokenOut])
def list_user_tokens(
    user: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = AfterQ,
) -> Page[TokenOut]:
    """A user's live tokens: any user's for platform roles, one's own for everyone."""
    if user == p.user:
        return list_tokens(session, p, limit, after, every_user=False)
    account = _may_see_tokens_of(session, p, user)
    return _tokens_page(session, select(Token).where(Token.user_id == account.id), limit, after)


@router.post("/users/{user}/tokens", response_model=TokenCreated, status_code=201)
def create_user_token(
    user: str, body: TokenIn, session: SessionDep, p: PrincipalDep
) -> TokenCreated:
    """A provider-admin gives a user a personal token carrying the user's roles now (platform
    and tenants); it never carries a role the user gains later."""
    require_platform(p, write=True)
    account = _user_by_name(session, user)
    if account.disabled:
        raise conflict(f"user {user} is disabled; enable it first")
    return _issue(session, p, account, body, user_scope(session, account.id), None)


@router.delete("/tokens/{token_id}", status_code=204)
def revoke_token(token_id: int, session: SessionDep, p: PrincipalDep) -> Response:
    """Revoke one of the caller's tokens (a provider-admin may revoke any)."""
    token = None if not 0 < token_id <= MAX_ID else session.get(Token, token_id)
    mine = token is not None and (
        token.user_id == p.user_id and (p.tenant_id is None or token.tenant_id == p.tenant_id)
    )
    if token is None or token.revoked or not (mine or p.is_provider_admin):
        raise not_found(f"token {token_id}")
    token.revoked = True
    commit_here(session)
    return Response(status_code=204)


@router.get("/tenants/{tenant}/tokens", response_model=Page[TokenOut])
def list_tenant_tokens(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = AfterQ,
) -> Page[TokenOut]:
    """The live tokens minted in the tenant (for its tenant-admins and the provider)."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    return _tokens_page(session, select(Token).where(Token.tenant_id == row.id), limit, after)


@router.delete("/tenants/{tenant}/tokens/{token_id}", status_code=204)
def revoke_tenant_token(
    tenant: str, token_id: int, session: SessionDep, p: PrincipalDep
) -> Response:
    """Revoke a token minted in the tenant."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    token = None if not 0 < token_id <= MAX_ID else session.get(Token, token_id)
    if token is None or token.revoked or token.tenant_id != row.id:
        raise not_found(f"token {token_id} of tenant {tenant}")
    token.revoked = True
    commit_here(session)
    return Response(status_code=204)
