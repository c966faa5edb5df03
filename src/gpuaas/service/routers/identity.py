"""Who is who over HTTP: tenants, users, tenant memberships, invitations and API tokens.

Each route translates the request to a call of :mod:`gpuaas.service.identity` (where the rules
live: who may do what, what a token carries, what a write changes) and its answer back; the
routes add only HTTP's own parts (status codes, ``204`` bodies, query parameters). Provider
admins manage tenants and users; a tenant admin manages the tenant's members (inviting users that
exist already) and can hand a member a token for the tenant. Tokens are checked against the
database, a valid answer kept for at most 1 s (:mod:`gpuaas.service.principal_cache`): a member
removed, a user disabled or a token revoked through this server is refused on the very next
request (the change empties the cache when it commits), and through another replica within 1 s.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.identity import members, tenants, tokens, users
from gpuaas.service.models.common import ID_CURSOR_PATTERN, PAGE_BOUNDS, Page
from gpuaas.service.models.identity import (
    USER_NAME_SCHEMA,
    InvitationOut,
    MemberIn,
    MemberOut,
    TenantIn,
    TenantOut,
    TenantPatch,
    TokenCreated,
    TokenIn,
    TokenOut,
    UserIn,
    UserOut,
    UserPatch,
    WhoAmI,
)

router = APIRouter(prefix="/v1", tags=["identity"])

LimitQ = Query(100, description="page size, 1-1000", json_schema_extra=PAGE_BOUNDS)
AfterQ = Query(None, min_length=1, description="the `next` cursor of the previous page")
#: the cursor of a list keyed by a numeric id (members, invitations, tokens): what the list
#: hands out is an id, so the document says digits (below 10**18, far above any id)
IdAfterQ = Query(
    None,
    description="the `next` cursor of the previous page (an id)",
    json_schema_extra={"pattern": ID_CURSOR_PATTERN},
)


# --- who am I ------------------------------------------------------------------------------


@router.get("/whoami", response_model=WhoAmI)
def whoami(session: SessionDep, p: PrincipalDep) -> WhoAmI:
    """The caller's user name, platform role and tenant roles."""
    return users.whoami(session, p)


# --- tenants -------------------------------------------------------------------------------


@router.get("/tenants", response_model=Page[TenantOut])
def list_tenants(
    session: SessionDep, p: PrincipalDep, limit: int = LimitQ, after: str | None = AfterQ
) -> Page[TenantOut]:
    """Every tenant for platform roles; a tenant member sees its own tenants."""
    return tenants.list_tenants(session, p, limit, after)


@router.post("/tenants", response_model=TenantOut, status_code=201)
def create_tenant(body: TenantIn, session: SessionDep, p: PrincipalDep) -> TenantOut:
    return tenants.create_tenant(session, p, body)


@router.get("/tenants/{tenant}", response_model=TenantOut)
def get_tenant(tenant: str, session: SessionDep, p: PrincipalDep) -> TenantOut:
    return tenants.get_tenant(session, p, tenant)


@router.patch("/tenants/{tenant}", response_model=TenantOut)
def update_tenant(
    tenant: str, body: TenantPatch, session: SessionDep, p: PrincipalDep
) -> TenantOut:
    """Rename for display or change the provider's terms; capacity cannot drop below the
    nominal quota of the tenant's own ClusterQueues and Cohorts (422 naming the flavor and
    resource). The tenant's root cohort follows the terms."""
    return tenants.update_tenant(session, p, tenant, body)


@router.delete("/tenants/{tenant}", status_code=204)
def delete_tenant(tenant: str, session: SessionDep, p: PrincipalDep) -> Response:
    """Delete a tenant with its queues, memberships and finished jobs; 409 while it has
    unfinished jobs or a provider object still needs one of its queues."""
    tenants.delete_tenant(session, p, tenant)
    return Response(status_code=204)


# --- users ---------------------------------------------------------------------------------


@router.get("/users", response_model=Page[UserOut])
def list_users(
    session: SessionDep, p: PrincipalDep, limit: int = LimitQ, after: str | None = AfterQ
) -> Page[UserOut]:
    return users.list_users(session, p, limit, after)


@router.post("/users", response_model=UserOut, status_code=201)
def create_user(body: UserIn, session: SessionDep, p: PrincipalDep) -> UserOut:
    return users.create_user(session, p, body)


@router.get("/users/{user}", response_model=UserOut)
def get_user(user: str, session: SessionDep, p: PrincipalDep) -> UserOut:
    """Platform roles read any user; everyone reads itself."""
    return users.get_user(session, p, user)


@router.patch("/users/{user}", response_model=UserOut)
def update_user(user: str, body: UserPatch, session: SessionDep, p: PrincipalDep) -> UserOut:
    return users.update_user(session, p, user, body)


@router.delete("/users/{user}", status_code=204)
def delete_user(user: str, session: SessionDep, p: PrincipalDep) -> Response:
    """Delete a user with its tokens and memberships; 409 when it has jobs (their history
    would go with it: disable the user instead)."""
    users.delete_user(session, p, user)
    return Response(status_code=204)


# --- memberships ---------------------------------------------------------------------------


@router.get("/tenants/{tenant}/members", response_model=Page[MemberOut])
def list_members(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = IdAfterQ,
) -> Page[MemberOut]:
    return members.list_members(session, p, tenant, limit, after)


@router.put(
    "/tenants/{tenant}/members/{user}",
    response_model=MemberOut,
    responses={202: {"model": MemberOut, "description": "the existing user was invited"}},
)
def put_member(
    tenant: str,
    user: Annotated[str, Path(json_schema_extra=USER_NAME_SCHEMA)],
    body: MemberIn,
    response: Response,
    session: SessionDep,
    p: PrincipalDep,
) -> MemberOut:
    """Give ``user`` a role in the tenant.

    A new user name is created with the role. A user that exists already and is not a member
    is *invited* (202, ``status: invited``): it becomes a member when it accepts (with a token
    of its own) or a provider-admin does; a provider-admin's own PUT adds it at once. Lowering
    a member's role lowers what every token carrying the membership may do; raising it never
    raises a token minted before (a token keeps the role it was minted with as its ceiling).
    """
    out = members.put_member(session, p, tenant, user, body.role)
    if out.status == members.INVITED:
        response.status_code = 202
    return out


@router.delete("/tenants/{tenant}/members/{user}", status_code=204)
def delete_member(tenant: str, user: str, session: SessionDep, p: PrincipalDep) -> Response:
    """Remove a member: the tokens minted for it in this tenant are revoked, and no token of
    the user answers for this tenant any more (a later membership is a new one)."""
    members.delete_member(session, p, tenant, user)
    return Response(status_code=204)


# --- invitations ---------------------------------------------------------------------------


@router.get("/invitations", response_model=Page[InvitationOut])
def list_my_invitations(
    session: SessionDep, p: PrincipalDep, limit: int = LimitQ, after: str | None = IdAfterQ
) -> Page[InvitationOut]:
    """The caller's pending invitations."""
    return members.list_my_invitations(session, p, limit, after)


@router.get("/tenants/{tenant}/invitations", response_model=Page[InvitationOut])
def list_invitations(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = IdAfterQ,
) -> Page[InvitationOut]:
    """The tenant's pending invitations."""
    return members.list_invitations(session, p, tenant, limit, after)


@router.post("/tenants/{tenant}/invitations/{user}/accept", response_model=MemberOut)
def accept_invitation(tenant: str, user: str, session: SessionDep, p: PrincipalDep) -> MemberOut:
    """The invited user (or a provider-admin) accepts: the user becomes a member with the
    invited role. Its tokens do not gain the membership; a token for it is minted anew."""
    return members.accept_invitation(session, p, tenant, user)


@router.delete("/tenants/{tenant}/invitations/{user}", status_code=204)
def delete_invitation(tenant: str, user: str, session: SessionDep, p: PrincipalDep) -> Response:
    """Withdraw an invitation (a tenant-admin) or decline it (the invited user)."""
    members.delete_invitation(session, p, tenant, user)
    return Response(status_code=204)


# --- tokens --------------------------------------------------------------------------------


@router.post(
    "/tenants/{tenant}/members/{user}/tokens", response_model=TokenCreated, status_code=201
)
def create_member_token(
    tenant: str, user: str, body: TokenIn, session: SessionDep, p: PrincipalDep
) -> TokenCreated:
    """A token for a member of the tenant, for this tenant only, with the member's role now as
    its ceiling; the secret is in this answer only."""
    return tokens.create_member_token(session, p, tenant, user, body)


@router.get("/tokens", response_model=Page[TokenOut])
def list_tokens(
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = IdAfterQ,
    every_user: bool = Query(
        False, alias="allUsers", description="every user's live tokens (platform roles)"
    ),
) -> Page[TokenOut]:
    """The caller's own live tokens (never their secrets); with ``allUsers=true`` everyone's."""
    return tokens.list_tokens(session, p, limit, after, every_user)


@router.post("/tokens", response_model=TokenCreated, status_code=201)
def create_token(body: TokenIn, session: SessionDep, p: PrincipalDep) -> TokenCreated:
    """A token for the caller carrying what the calling token carries (its tenant too, if it
    was minted in one), expiring no later than it."""
    return tokens.create_token(session, p, body)


@router.get("/users/{user}/tokens", response_model=Page[TokenOut])
def list_user_tokens(
    user: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = IdAfterQ,
) -> Page[TokenOut]:
    """A user's live tokens: any user's for platform roles, one's own for everyone."""
    return tokens.list_user_tokens(session, p, user, limit, after)


@router.post("/users/{user}/tokens", response_model=TokenCreated, status_code=201)
def create_user_token(
    user: str, body: TokenIn, session: SessionDep, p: PrincipalDep
) -> TokenCreated:
    """A provider-admin gives a user a personal token carrying the user's roles now (platform
    and tenants); it never carries a role the user gains later."""
    return tokens.create_user_token(session, p, user, body)


@router.delete("/tokens/{token_id}", status_code=204)
def revoke_token(token_id: int, session: SessionDep, p: PrincipalDep) -> Response:
    """Revoke one of the caller's tokens (a provider-admin may revoke any)."""
    tokens.revoke_token(session, p, token_id)
    return Response(status_code=204)


@router.get("/tenants/{tenant}/tokens", response_model=Page[TokenOut])
def list_tenant_tokens(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = IdAfterQ,
) -> Page[TokenOut]:
    """The live tokens minted in the tenant (for its tenant-admins and the provider)."""
    return tokens.list_tenant_tokens(session, p, tenant, limit, after)


@router.delete("/tenants/{tenant}/tokens/{token_id}", status_code=204)
def revoke_tenant_token(
    tenant: str, token_id: int, session: SessionDep, p: PrincipalDep
) -> Response:
    """Revoke a token minted in the tenant."""
    tokens.revoke_tenant_token(session, p, tenant, token_id)
    return Response(status_code=204)
