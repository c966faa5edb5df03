"""Client commands for identity: ``tenants``, ``users``, ``members`` and ``tokens``."""

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
    as_json: JsonOption = False,
) -> None:
    """Create a tenant (provider admin)."""
    caps = parse_capacity(capacity or [])
    with connect() as client:
        tenant = client.create_tenant(name, display_name=display_name, capacity=caps)
    show_done(tenant, as_json, f"tenant {name} created")


@tenants_app.command("update")
@handles_errors
def tenants_update(
    name: str,
    display_name: Annotated[str | None, typer.Option("--display-name")] = None,
    capacity: CapacityOption = None,
    as_json: JsonOption = False,
) -> None:
    """Change a tenant's display name or capacity (capacity is replaced as a whole)."""
    caps = parse_capacity(capacity or [])
    if display_name is None and caps is None:
        raise UsageError("nothing to change: give --display-name and/or --capacity")
    with connect() as client:
        tenant = client.update_tenant(name, display_name=display_name, capacity=caps)
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
    """Give a user a role in the tenant (the user is created when missing)."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        member = client.set_member(name, user, role)
    show_done(member, as_json, f"{user} is {role} in {name}")


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
    """Issue a token for a member (tenant admin); the secret is shown once."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        issued = client.create_member_token(name, user, token_name, expires_in=expires_in)
    _show_token(issued, as_json)


# -- tokens -----------------------------------------------------------------------------------

tokens_app = group("tokens", "Your API tokens.")
TOKEN_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("NAME", field("name")),
    ("PREFIX", field("prefix")),
    ("USER", field("user")),
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
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Your tokens (never their secrets)."""
    with connect() as client:
        page = fetch(lambda n, a: client.list_tokens(n, a), limit, after, follow)
    show_page(page, TOKEN_COLUMNS, as_json)


@tokens_app.command("create")
@handles_errors
def tokens_create(
    name: str,
    expires_in: Annotated[int | None, typer.Option("--expires-in", help="Seconds.")] = None,
    as_json: JsonOption = False,
) -> None:
    """A new token for yourself; the secret is shown once."""
    with connect() as client:
        issued = client.create_token(name, expires_in=expires_in)
    _show_token(issued, as_json)


@tokens_app.command("revoke")
@handles_errors
def tokens_revoke(token_id: str, as_json: JsonOption = False) -> None:
    """Revoke a token by id (yours; a provider admin may revoke any)."""
    with connect() as client:
        client.revoke_token(token_id)
    show_done({"revoked": token_id}, as_json, f"token {token_id} revoked")
