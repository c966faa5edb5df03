"""Client commands for identity: ``tenants``, ``users``, ``members``, ``invitations`` and
``tokens``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from gpuaas.cli.client import (
    AfterOption,
    AllOption,
    Column,
    JsonOption,
    LimitOption,
    TenantOption,
    UsageError,
    capacity_text,
    connect,
    fetch,
    field,
    group,
    handles_errors,
    parse_capacity,
    parse_limits,
    print_json,
    resolve_tenant,
    short_when,
    show_done,
    show_object,
    show_page,
)

# -- tenants ----------------------------------------------------------------------------------

tenants_app = group("tenants", "Tenants: customers or teams, and the capacity they are given.")
TENANT_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("DISPLAY NAME", field("displayName")),
    ("CAPACITY", field("capacity", fmt=capacity_text)),
    ("CREATED", field("createdAt", fmt=short_when)),
]
CapacityOption = Annotated[
    list[str] | None,
    typer.Option(
        "--capacity",
        help="flavor:resource=quantity, repeatable (e.g. h100:nvidia.com/gpu=64).",
    ),
]
ParentCohortOption = Annotated[
    str | None,
    typer.Option(
        "--parent-cohort", help="The provider Cohort the tenant's root cohort hangs from."
    ),
]
BorrowingOption = Annotated[
    list[str] | None,
    typer.Option(
        "--borrowing",
        help="What the tenant may borrow under its parent: flavor:resource=quantity, repeatable.",
    ),
]
LendingOption = Annotated[
    list[str] | None,
    typer.Option(
        "--lending",
        help="What the tenant lends its parent at most: flavor:resource=quantity, repeatable.",
    ),
]
MaxJobOption = Annotated[
    list[str] | None,
    typer.Option("--max-job", help="The most one job may ask for: resource=quantity, repeatable."),
]
PriorityCeilingOption = Annotated[
    int | None,
    typer.Option("--priority-ceiling", help="The highest value of the tenant's priority classes."),
]

StorageQuotaOption = Annotated[
    str | None,
    typer.Option("--storage-quota", help="The most bytes the tenant's volumes may hold (10Ti)."),
]


def _terms(
    parent_cohort: str | None,
    borrowing: list[str] | None,
    lending: list[str] | None,
    max_job: list[str] | None,
    priority_ceiling: int | None,
    storage_quota: str | None = None,
) -> dict[str, Any]:
    """The provider's terms given on the command line, as the SDK's keyword arguments."""
    return {
        "parent_cohort": parent_cohort,
        "borrowing": parse_capacity(borrowing or [], "--borrowing"),
        "lending": parse_capacity(lending or [], "--lending"),
        "max_job": parse_limits(max_job or [], "--max-job"),
        "priority_ceiling": priority_ceiling,
        "storage_quota": storage_quota,
    }


@tenants_app.command("list")
@handles_errors
def tenants_list(
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Every tenant (platform roles) or the tenants you are a member of."""
    with connect() as client:
        page = fetch(lambda n, a: client.list_tenants(n, a), limit, after, follow)
    show_page(page, TENANT_COLUMNS, as_json)


@tenants_app.command("get")
@handles_errors
def tenants_get(name: str, as_json: JsonOption = False) -> None:
    """One tenant."""
    with connect() as client:
        tenant = client.get_tenant(name)
    print_json(tenant) if as_json else show_object(tenant)


@tenants_app.command("create")
@handles_errors
def tenants_create(
    name: str,
    display_name: Annotated[str | None, typer.Option("--display-name")] = None,
    capacity: CapacityOption = None,
    parent_cohort: ParentCohortOption = None,
    borrowing: BorrowingOption = None,
    lending: LendingOption = None,
    max_job: MaxJobOption = None,
    priority_ceiling: PriorityCeilingOption = None,
    storage_quota: StorageQuotaOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a tenant with its grant and terms (provider admin)."""
    caps = parse_capacity(capacity or [])
    terms = _terms(parent_cohort, borrowing, lending, max_job, priority_ceiling, storage_quota)
    with connect() as client:
        tenant = client.create_tenant(name, display_name=display_name, capacity=caps, **terms)
    show_done(tenant, as_json, f"tenant {name} created")


@tenants_app.command("update")
@handles_errors
def tenants_update(
    name: str,
    display_name: Annotated[str | None, typer.Option("--display-name")] = None,
    capacity: CapacityOption = None,
    parent_cohort: ParentCohortOption = None,
    borrowing: BorrowingOption = None,
    lending: LendingOption = None,
    max_job: MaxJobOption = None,
    priority_ceiling: PriorityCeilingOption = None,
    storage_quota: StorageQuotaOption = None,
    no_parent_cohort: Annotated[
        bool,
        typer.Option(
            "--no-parent-cohort",
            help="Detach the tenant's root cohort (it then neither borrows nor lends).",
        ),
    ] = False,
    no_priority_ceiling: Annotated[
        bool, typer.Option("--no-priority-ceiling", help="Back to the provider's default.")
    ] = False,
    no_storage_quota: Annotated[
        bool, typer.Option("--no-storage-quota", help="No limit on the tenant's volumes.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Change a tenant's display name, grant or terms (each given one is replaced whole)."""
    caps = parse_capacity(capacity or [])
    terms = _terms(parent_cohort, borrowing, lending, max_job, priority_ceiling, storage_quota)
    if no_parent_cohort:  # a root without a parent has no borrowing or lending limits
        terms["borrowing"], terms["lending"] = {}, {}
    clear = [
        term
        for term, wanted in (
            ("parentCohort", no_parent_cohort),
            ("priorityCeiling", no_priority_ceiling),
            ("storageQuota", no_storage_quota),
        )
        if wanted
    ]
    if (
        display_name is None
        and caps is None
        and not clear
        and all(v is None for v in terms.values())
    ):
        raise UsageError("nothing to change: give --display-name, --capacity or a term")
    with connect() as client:
        tenant = client.update_tenant(
            name, display_name=display_name, capacity=caps, clear=clear, **terms
        )
    show_done(tenant, as_json, f"tenant {name} updated")


@tenants_app.command("delete")
@handles_errors
def tenants_delete(
    name: str,
    yes: Annotated[
        bool, typer.Option("--yes", help="Confirm: its queues and jobs go too.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Delete a tenant with its queues, members and jobs."""
    if not yes:
        raise UsageError(f"deleting tenant {name} removes its queues and jobs: add --yes")
    with connect() as client:
        client.delete_tenant(name)
    show_done({"deleted": name}, as_json, f"tenant {name} deleted")


# -- users ------------------------------------------------------------------------------------

users_app = group("users", "Users of the platform (provider admin).")
USER_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("DISPLAY NAME", field("displayName")),
    ("PLATFORM ROLE", field("platformRole")),
    ("DISABLED", field("disabled")),
    ("CREATED", field("createdAt", fmt=short_when)),
]
PlatformRoleOption = Annotated[
    str | None,
    typer.Option("--platform-role", help="provider-admin or viewer (platform-wide)."),
]


@users_app.command("list")
@handles_errors
def users_list(
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Every user."""
    with connect() as client:
        page = fetch(lambda n, a: client.list_users(n, a), limit, after, follow)
    show_page(page, USER_COLUMNS, as_json)


@users_app.command("get")
@handles_errors
def users_get(name: str, as_json: JsonOption = False) -> None:
    """One user (you may always read yourself)."""
    with connect() as client:
        user = client.get_user(name)
    print_json(user) if as_json else show_object(user)


@users_app.command("create")
@handles_errors
def users_create(
    name: str,
    display_name: Annotated[str | None, typer.Option("--display-name")] = None,
    platform_role: PlatformRoleOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a user; give it tenant roles with `gpuaas members set`."""
    with connect() as client:
        user = client.create_user(name, display_name=display_name, platform_role=platform_role)
    show_done(user, as_json, f"user {name} created")


@users_app.command("update")
@handles_errors
def users_update(
    name: str,
    display_name: Annotated[str | None, typer.Option("--display-name")] = None,
    platform_role: PlatformRoleOption = None,
    disabled: Annotated[
        bool | None, typer.Option("--disabled/--enabled", help="Refuse its tokens.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Change a user's display name, platform role, or whether it may sign in."""
    fields = {
        k: v
        for k, v in {
            "displayName": display_name,
            "platformRole": platform_role,
            "disabled": disabled,
        }.items()
        if v is not None
    }
    if not fields:
        raise UsageError("nothing to change: give --display-name, --platform-role or --disabled")
    with connect() as client:
        user = client.update_user(name, **fields)
    show_done(user, as_json, f"user {name} updated")


@users_app.command("delete")
@handles_errors
def users_delete(name: str, as_json: JsonOption = False) -> None:
    """Delete a user and its tokens."""
    with connect() as client:
        client.delete_user(name)
    show_done({"deleted": name}, as_json, f"user {name} deleted")


# -- members ----------------------------------------------------------------------------------

members_app = group("members", "Who belongs to a tenant, and with which role.")
MEMBER_COLUMNS: list[Column] = [
    ("USER", field("user", "name")),
    ("ROLE", field("role")),
    ("SINCE", field("createdAt", fmt=short_when)),
]


@members_app.command("list")
@handles_errors
def members_list(
    tenant: TenantOption = None,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """The tenant's members."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        page = fetch(lambda n, a: client.list_members(name, n, a), limit, after, follow)
    show_page(page, MEMBER_COLUMNS, as_json, title=f"members of {name}")


@members_app.command("set")
@handles_errors
def members_set(
    user: str,
    role: Annotated[str, typer.Argument(help="tenant-admin, tenant-user or viewer")],
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """Give a user a role in the tenant. A new user name is created; a user that exists already
    is invited (it joins when it or a provider-admin accepts)."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        member = client.set_member(name, user, role)
    if member.get("status") == "invited":
        text = (
            f"{user} exists already: invited as {role} to {name} "
            f"(it joins once it runs `gpuaas invitations accept {name}`, or a provider-admin does)"
        )
    else:
        text = f"{user} is {role} in {name}"
    show_done(member, as_json, text)


@members_app.command("remove")
@handles_errors
def members_remove(user: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """Take a user out of the tenant."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        client.remove_member(name, user)
    show_done({"tenant": name, "removed": user}, as_json, f"{user} removed from {name}")


@members_app.command("token")
@handles_errors
def members_token(
    user: str,
    token_name: Annotated[str, typer.Option("--name", help="What the token is for.")],
    expires_in: Annotated[int | None, typer.Option("--expires-in", help="Seconds.")] = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """Issue a token for a member (tenant admin): it answers for this tenant only, with the
    member's role now at most; the secret is shown once."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        issued = client.create_member_token(name, user, token_name, expires_in=expires_in)
    _show_token(issued, as_json)


# -- invitations ------------------------------------------------------------------------------

invitations_app = group("invitations", "Invitations of existing users to tenants.")
INVITATION_COLUMNS: list[Column] = [
    ("TENANT", field("tenant")),
    ("USER", field("user")),
    ("ROLE", field("role")),
    ("INVITED BY", field("invitedBy")),
    ("CREATED", field("createdAt", fmt=short_when)),
]
ForTenantOption = Annotated[
    str | None, typer.Option("--tenant", "-t", help="A tenant's (default: your own).")
]
UserOption = Annotated[
    str | None,
    typer.Option("--user", help="Whose invitation (default: yours; a provider-admin's choice)."),
]


@invitations_app.command("list")
@handles_errors
def invitations_list(
    tenant: ForTenantOption = None,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Your pending invitations, or a tenant's (--tenant)."""
    with connect() as client:
        if tenant:
            page = fetch(
                lambda n, a: client.list_tenant_invitations(tenant, n, a), limit, after, follow
            )
        else:
            page = fetch(lambda n, a: client.list_invitations(n, a), limit, after, follow)
    show_page(page, INVITATION_COLUMNS, as_json)


def _invited(client: Any, user: str | None) -> str:
    return user or str(client.whoami().get("user"))


@invitations_app.command("accept")
@handles_errors
def invitations_accept(tenant: str, user: UserOption = None, as_json: JsonOption = False) -> None:
    """Accept an invitation to TENANT (yours, with a token of your own; or, as a provider-admin,
    a user's)."""
    with connect() as client:
        who = _invited(client, user)
        member = client.accept_invitation(tenant, who)
    show_done(member, as_json, f"{who} is {member.get('role')} in {tenant}")


@invitations_app.command("decline")
@handles_errors
def invitations_decline(tenant: str, user: UserOption = None, as_json: JsonOption = False) -> None:
    """Decline an invitation to TENANT (yours), or withdraw a user's (--user, tenant-admin)."""
    with connect() as client:
        who = _invited(client, user)
        client.delete_invitation(tenant, who)
    show_done(
        {"tenant": tenant, "declined": who}, as_json, f"invitation of {who} to {tenant} removed"
    )


# -- tokens -----------------------------------------------------------------------------------

tokens_app = group("tokens", "API tokens: yours, a user's (provider), a tenant's (tenant-admin).")
TOKEN_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("NAME", field("name")),
    ("FINGERPRINT", field("fingerprint")),
    ("USER", field("user")),
    ("TENANT", field("tenant")),
    ("CREATED", field("createdAt", fmt=short_when)),
    ("EXPIRES", field("expiresAt", fmt=short_when)),
]


def _show_token(issued: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(issued)
        return
    typer.echo(
        f"token {issued.get('name')} (id {issued.get('id')}) — shown once, keep it:\n"
        f"{issued.get('token')}"
    )


@tokens_app.command("list")
@handles_errors
def tokens_list(
    user: Annotated[
        str | None, typer.Option("--user", help="A user's tokens (platform roles).")
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-t", help="The tokens minted in a tenant.")
    ] = None,
    everyone: Annotated[
        bool, typer.Option("--everyone", help="Every user's tokens (platform roles).")
    ] = False,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Your live tokens, a user's (--user), a tenant's (--tenant) or everyone's (--everyone);
    never their secrets."""
    if sum(bool(x) for x in (user, tenant, everyone)) > 1:
        raise UsageError("give one of --user, --tenant and --everyone, not several")
    with connect() as client:
        if everyone:
            page = fetch(
                lambda n, a: client.list_tokens(n, a, all_users=True), limit, after, follow
            )
        elif user:
            page = fetch(lambda n, a: client.list_user_tokens(user, n, a), limit, after, follow)
        elif tenant:
            page = fetch(lambda n, a: client.list_tenant_tokens(tenant, n, a), limit, after, follow)
        else:
            page = fetch(lambda n, a: client.list_tokens(n, a), limit, after, follow)
    show_page(page, TOKEN_COLUMNS, as_json)


@tokens_app.command("create")
@handles_errors
def tokens_create(
    name: str,
    expires_in: Annotated[
        int | None, typer.Option("--expires-in", help="Seconds (at most your token's own).")
    ] = None,
    user: Annotated[
        str | None,
        typer.Option("--user", help="For another user, with its roles now (provider-admin)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """A new token carrying what yours carries (or, with --user, a user's personal token); it
    cannot outlive yours. The secret is shown once."""
    with connect() as client:
        if user:
            issued = client.create_user_token(user, name, expires_in=expires_in)
        else:
            issued = client.create_token(name, expires_in=expires_in)
    _show_token(issued, as_json)


@tokens_app.command("revoke")
@handles_errors
def tokens_revoke(
    token_id: str,
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-t", help="A token minted in this tenant.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Revoke a token by id: yours, any (provider-admin), or one minted in a tenant you
    administer (--tenant)."""
    with connect() as client:
        if tenant:
            client.revoke_tenant_token(tenant, token_id)
        else:
            client.revoke_token(token_id)
    show_done({"revoked": token_id}, as_json, f"token {token_id} revoked")
