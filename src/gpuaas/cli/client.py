"""The client commands: ``gpuaas login``, ``whoami``, and one group per kind of API object.

Every command prints a rich table (or a key/value view) for people and, with ``--json``, the
API's JSON only, for scripts. An error answer prints ``error: <detail>`` and each field at
fault to stderr and exits 1: a user never sees a traceback for a server's "no".
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, ParamSpec, TypeVar

import httpx
import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuaas.cli.main import app
from gpuaas.client.config import ConfigError, load_credentials, save_credentials
from gpuaas.client.sdk import ApiError, Client, Page

P = ParamSpec("P")
R = TypeVar("R")

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON only.")]
TenantOption = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        "-t",
        envvar="GPUAAS_TENANT",
        help="Tenant (default: your only tenant).",
    ),
]
LimitOption = Annotated[int, typer.Option("--limit", min=1, max=1000, help="Items per page.")]
AfterOption = Annotated[
    str | None, typer.Option("--after", help="Cursor: the `next` of the previous page.")
]
AllOption = Annotated[bool, typer.Option("--all", help="Follow every page.")]
FileArgument = Annotated[Path, typer.Option("--file", "-f", help="YAML file ('-' for stdin).")]


class UsageError(Exception):
    """The command cannot run as given (no tenant to pick, an unreadable file)."""


# -- how commands reach the server (tests replace these two) -----------------------------------


def make_client(url: str, token: str) -> Client:
    return Client(url, token)


def connect() -> Client:
    """The server and token of ``gpuaas login`` (or $GPUAAS_URL / $GPUAAS_TOKEN)."""
    credentials = load_credentials()
    return make_client(credentials.url, credentials.token)


# -- output -----------------------------------------------------------------------------------


def _stdout() -> Console:
    return Console(soft_wrap=False)


def fail(message: str, details: Iterable[str] = ()) -> NoReturn:
    """``error: ...`` on stderr, unwrapped (scripts grep it), and exit 1."""
    typer.echo(f"error: {message}", err=True)
    for line in details:
        typer.echo(f"  {line}", err=True)
    raise typer.Exit(1)


def handles_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn API, configuration, connection and input errors into one line on stderr."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ApiError as exc:
            lines = [f"{e['field']}: {e['message']}" for e in exc.errors]
            if lines and exc.detail in (lines[0], "; ".join(lines)):
                fail(lines[0], lines[1:])  # the detail is these lines joined: say each once
            fail(exc.detail, lines)
        except (ConfigError, UsageError) as exc:
            fail(str(exc))
        except httpx.TimeoutException as exc:
            fail(f"the server did not answer in time ({type(exc).__name__})")
        except httpx.TransportError as exc:
            try:
                target = str(exc.request.url)
            except RuntimeError:  # raised before a request was attached
                target = "the server"
            fail(f"cannot reach {target}: {exc}")

    return wrapper


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def _when(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return "" if value is None else str(value)


def _short_when(value: Any) -> str:
    """Table cells: month-day and time (UTC), narrow enough not to wrap."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC).strftime("%m-%d %H:%M:%S")
    return _when(value)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping | list):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def _capacity(value: Any) -> str:
    """``{flavor: {resource: qty}}`` as one line per flavor."""
    if not isinstance(value, Mapping):
        return _cell(value)
    return "\n".join(
        f"{flavor}: " + " ".join(f"{res}={qty}" for res, qty in (resources or {}).items())
        for flavor, resources in value.items()
    )


def _quotas(groups: Any) -> str:
    """A ClusterQueue's resourceGroups as one line per flavor: ``h100: nvidia.com/gpu=128
    (+64)`` where ``+N`` is the borrowing limit."""
    if not isinstance(groups, list):
        return _cell(groups)
    lines = []
    for group in groups:
        for flavor in group.get("flavors", []) if isinstance(group, Mapping) else []:
            quotas = [
                f"{r.get('name')}={r.get('nominalQuota')}"
                + (f"(+{r['borrowingLimit']})" if r.get("borrowingLimit") is not None else "")
                for r in flavor.get("resources", [])
            ]
            lines.append(f"{flavor.get('name')}: {' '.join(quotas)}")
    return "\n".join(lines)


def _ranges(resources: Any) -> str:
    """A hardware profile's resources: ``nvidia.com/gpu=1 [1-4]`` (default [min-max])."""
    if not isinstance(resources, list):
        return _cell(resources)
    return "\n".join(
        f"{r.get('name')}={r.get('default')} [{r.get('min')}-{r.get('max')}]"
        for r in resources
        if isinstance(r, Mapping)
    )


def _labels(labels: Any) -> str:
    if not isinstance(labels, Mapping):
        return _cell(labels)
    return " ".join(f"{k}={v}" for k, v in labels.items())


Column = tuple[str, Callable[[Mapping[str, Any]], Any]]


def field(*path: str, fmt: Callable[[Any], str] = _cell) -> Callable[[Mapping[str, Any]], str]:
    """A column reading the first of ``path`` present (field names may differ by object)."""

    def read(item: Mapping[str, Any]) -> str:
        for key in path:
            value: Any = item
            for part in key.split("."):
                value = value.get(part) if isinstance(value, Mapping) else None
            if value is not None:
                return fmt(value)
        return ""

    return read


def show_table(items: list[Any], columns: list[Column], title: str | None = None) -> None:
    table = Table(title=escape(title) if title else None, show_lines=False)
    for position, (header, _) in enumerate(columns):
        # the columns that name the row are never split
        table.add_column(header, no_wrap=position == 0 or header == "NAME", overflow="fold")
    for item in items:
        row = item if isinstance(item, Mapping) else {"value": item}
        table.add_row(*(Text(str(read(row))) for _, read in columns))  # data is never markup
    _stdout().print(table)


def show_object(obj: Any, title: str | None = None) -> None:
    """Key/value view of one object; nested values as compact YAML."""
    if not isinstance(obj, Mapping):
        typer.echo(_cell(obj))
        return
    table = Table(
        title=escape(title) if title else None, show_header=False, box=None, pad_edge=False
    )
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in obj.items():
        if isinstance(value, Mapping | list) and value:
            text = yaml.safe_dump(value, sort_keys=False, default_flow_style=False).rstrip()
        elif key.endswith("At"):
            text = _when(value)
        else:
            text = _cell(value)
        table.add_row(Text(str(key)), Text(text))
    _stdout().print(table)


def show_page(
    page: Page,
    columns: list[Column],
    as_json: bool,
    title: str | None = None,
) -> None:
    if as_json:
        print_json({"items": page.items, "next": page.next})
        return
    show_table(page.items, columns, title)
    if page.next:
        sys.stdout.flush()
        typer.echo(f"more: --after {page.next}  (or --all)", err=True)


def fetch(
    one_page: Callable[[int, str | None], Page],
    limit: int,
    after: str | None,
    follow: bool,
) -> Page:
    """One page, or every page from ``after`` on when ``follow``."""
    page = one_page(limit, after)
    if not follow:
        return page
    items = list(page.items)
    while page.next:
        page = one_page(limit, page.next)
        items.extend(page.items)
    return Page(items=items, next=None)


def show_done(obj: Any, as_json: bool, message: str) -> None:
    if as_json:
        print_json(obj)
    else:
        typer.echo(message)


# -- input ------------------------------------------------------------------------------------


def read_text(path: Path) -> str:
    if str(path) == "-":
        return sys.stdin.read()
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a UTF-8 text file") from None


def read_documents(path: Path) -> list[dict[str, Any]]:
    """Every YAML (or JSON) document of the file, each a mapping."""
    try:
        docs = [d for d in yaml.safe_load_all(read_text(path)) if d is not None]
    except yaml.YAMLError as exc:
        raise UsageError(f"{path}: not valid YAML: {exc}") from None
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise UsageError(f"{path}: document {index + 1} is not a mapping")
    if not docs:
        raise UsageError(f"{path}: no document in the file")
    return docs


def named_spec(doc: Mapping[str, Any], path: Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``{name, spec, ...}`` or a Kueue object ``{kind, metadata: {name}, spec}`` ->
    (name, spec, other fields)."""
    metadata = doc.get("metadata")
    name = doc.get("name") or (metadata.get("name") if isinstance(metadata, Mapping) else None)
    if not isinstance(name, str) or not name:
        raise UsageError(f"{path}: missing name (give `name:` or `metadata.name`)")
    spec = doc.get("spec", {})
    if not isinstance(spec, dict):
        raise UsageError(f"{path}: spec must be a mapping")
    extra = {k: v for k, v in doc.items() if k not in ("name", "spec", "metadata", "kind")}
    extra.pop("apiVersion", None)
    return name, spec, extra


def resolve_tenant(client: Client, tenant: str | None) -> str:
    """The tenant given, or the caller's only tenant."""
    if tenant:
        return tenant
    who = client.whoami()
    tenants = [t.get("tenant") for t in who.get("tenants", []) if isinstance(t, Mapping)]
    if len(tenants) == 1 and tenants[0]:
        return str(tenants[0])
    if not tenants:
        raise UsageError(f"give --tenant: {who.get('user', 'you')} is a member of no tenant")
    raise UsageError(
        f"give --tenant: {who.get('user', 'you')} is a member of {len(tenants)} tenants "
        f"({', '.join(str(t) for t in tenants)})"
    )


def parse_capacity(entries: list[str]) -> dict[str, dict[str, str]] | None:
    """``flavor:resource=quantity`` (repeatable) -> ``{flavor: {resource: quantity}}``."""
    if not entries:
        return None
    capacity: dict[str, dict[str, str]] = {}
    for entry in entries:
        flavor, _, rest = entry.partition(":")
        resource, _, quantity = rest.partition("=")
        if not (flavor and resource and quantity):
            raise UsageError(
                f"--capacity {entry!r}: use flavor:resource=quantity, e.g. h100:nvidia.com/gpu=64"
            )
        capacity.setdefault(flavor, {})[resource] = quantity
    return capacity


# -- login and whoami -------------------------------------------------------------------------


@app.command()
@handles_errors
def login(
    url: Annotated[str, typer.Argument(help="The server, e.g. http://127.0.0.1:8080")],
    token: Annotated[str, typer.Argument(help="An API token ('-' reads it from stdin).")],
    as_json: JsonOption = False,
) -> None:
    """Check the token against the server and remember both for the other commands."""
    if token == "-":
        token = sys.stdin.readline().strip()
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"{url!r}: the URL must start with http:// or https://")
    with make_client(url, token) as client:
        try:
            who = client.whoami()
        except ApiError as exc:
            if exc.status == 404:
                raise UsageError(f"{url}: not a gpuaas server (no /v1/whoami)") from None
            raise
    path = save_credentials(url.rstrip("/"), token)
    if as_json:
        print_json({**who, "url": url.rstrip("/"), "config": str(path)})
        return
    roles = [f"{t.get('tenant')} ({t.get('role')})" for t in who.get("tenants", [])]
    if who.get("platformRole"):
        roles.insert(0, f"platform ({who['platformRole']})")
    typer.echo(
        f"logged in to {url} as {who.get('user')}: {', '.join(roles) or 'no roles yet'}\n"
        f"saved to {path}"
    )


@app.command()
@handles_errors
def whoami(as_json: JsonOption = False) -> None:
    """Who the saved token speaks for, and its roles."""
    with connect() as client:
        who = client.whoami()
    if as_json:
        print_json(who)
        return
    show_object({"user": who.get("user"), "platformRole": who.get("platformRole")})
    if who.get("tenants"):
        show_table(who["tenants"], [("TENANT", field("tenant")), ("ROLE", field("role"))])
    else:
        typer.echo("no tenant roles")


def group(name: str, help_text: str) -> typer.Typer:
    sub = typer.Typer(help=help_text, no_args_is_help=True)
    app.add_typer(sub, name=name)
    return sub


# -- tenants ----------------------------------------------------------------------------------

tenants_app = group("tenants", "Tenants: customers or teams, and the capacity they are given.")
TENANT_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("DISPLAY NAME", field("displayName")),
    ("CAPACITY", field("capacity", fmt=_capacity)),
    ("CREATED", field("createdAt", fmt=_short_when)),
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
    ("CREATED", field("createdAt", fmt=_short_when)),
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
    ("SINCE", field("createdAt", fmt=_short_when)),
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
    ("CREATED", field("createdAt", fmt=_short_when)),
    ("EXPIRES", field("expiresAt", fmt=_short_when)),
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


# -- nodes ------------------------------------------------------------------------------------

nodes_app = group("nodes", "The fleet's nodes (platform roles).")
NODE_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("MODEL", field("gpuModel")),
    ("GPUS", field("gpuCount")),
    ("POOL", lambda node: _cell((node.get("labels") or {}).get("gpuaas.io/pool"))),
    ("ZONE", field("topology.zone")),
    ("CORDONED", field("cordoned")),
    ("DRAINING", field("draining")),
]


@nodes_app.command("list")
@handles_errors
def nodes_list(
    model: Annotated[str | None, typer.Option("--model", help="GPU model.")] = None,
    cordoned: Annotated[bool | None, typer.Option("--cordoned/--schedulable")] = None,
    pool: Annotated[str | None, typer.Option("--pool")] = None,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Nodes, optionally by GPU model, pool or cordon state."""
    with connect() as client:
        page = fetch(
            lambda n, a: client.list_nodes(n, a, model=model, cordoned=cordoned, pool=pool),
            limit,
            after,
            follow,
        )
    show_page(page, NODE_COLUMNS, as_json)


@nodes_app.command("get")
@handles_errors
def nodes_get(name: str, as_json: JsonOption = False) -> None:
    """One node: its GPUs and what is allocated on them."""
    with connect() as client:
        node = client.get_node(name)
    print_json(node) if as_json else show_object(node)


@nodes_app.command("register")
@handles_errors
def nodes_register(file: FileArgument, as_json: JsonOption = False) -> None:
    """Register nodes: a Fleet inventory file (every `nodes:` entry) or one entry."""
    created: list[Any] = []
    with connect() as client:
        for doc in read_documents(file):
            entries = doc.get("nodes") if "nodes" in doc else [doc]
            if not isinstance(entries, list):
                raise UsageError(f"{file}: `nodes` must be a list")
            for entry in entries:
                result = client.register_nodes(entry)
                created.extend(result if isinstance(result, list) else [result])
    if as_json:
        print_json(created)
    else:
        show_table(created, NODE_COLUMNS, title=f"{len(created)} nodes registered")


def _node_action(action: str, past: str) -> Callable[[str, bool], None]:
    @handles_errors
    def run(name: str, as_json: JsonOption = False) -> None:
        with connect() as client:
            node = getattr(client, f"{action}_node")(name)
        show_done(node, as_json, f"node {name} {past}")

    run.__doc__ = {
        "cordon": "Stop placing new work on a node; running jobs stay.",
        "uncordon": "Let the scheduler place work on a node again.",
        "drain": "Cordon a node and requeue the jobs running there.",
    }[action]
    return run


nodes_app.command("cordon")(_node_action("cordon", "cordoned"))
nodes_app.command("uncordon")(_node_action("uncordon", "uncordoned"))
nodes_app.command("drain")(_node_action("drain", "draining"))


@nodes_app.command("delete")
@handles_errors
def nodes_delete(name: str, as_json: JsonOption = False) -> None:
    """Remove a node (refused while jobs use it)."""
    with connect() as client:
        client.delete_node(name)
    show_done({"deleted": name}, as_json, f"node {name} deleted")


# -- governance -------------------------------------------------------------------------------

FLAVOR_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("NODE LABELS", field("spec.nodeLabels", fmt=_labels)),
    ("TAINTS", field("spec.nodeTaints")),
    ("TOLERATIONS", field("spec.tolerations")),
]
SPEC_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("TENANT", field("tenant")),
    ("SPEC", field("spec")),
]

flavors_app = group("flavors", "ResourceFlavors: kinds of capacity, mapped to node labels.")
cohorts_app = group("cohorts", "Cohorts: trees of cluster queues that lend and borrow.")


@flavors_app.command("list")
@handles_errors
def flavors_list(
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Every resource flavor."""
    with connect() as client:
        page = fetch(lambda n, a: client.list_flavors(n, a), limit, after, follow)
    show_page(page, FLAVOR_COLUMNS, as_json)


@flavors_app.command("create")
@handles_errors
def flavors_create(file: FileArgument, as_json: JsonOption = False) -> None:
    """Create flavors from a file ({name, spec} or Kueue ResourceFlavor documents)."""
    with connect() as client:
        made = [client.create_flavor(*named_spec(doc, file)[:2]) for doc in read_documents(file)]
    _show_created(made, as_json, "flavor")


@cohorts_app.command("list")
@handles_errors
def cohorts_list(
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Every cohort."""
    with connect() as client:
        page = fetch(lambda n, a: client.list_cohorts(n, a), limit, after, follow)
    show_page(page, SPEC_COLUMNS, as_json)


def _show_created(made: list[Any], as_json: bool, what: str) -> None:
    if as_json:
        print_json(made[0] if len(made) == 1 else made)
        return
    for obj in made:
        name = obj.get("name") if isinstance(obj, Mapping) else obj
        typer.echo(f"{what} {name} created")


cq_app = group("cluster-queues", "ClusterQueues: quota per flavor and resource.")
CQ_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("TENANT", field("tenant")),
    ("COHORT", field("spec.cohortName", "spec.cohort")),
    ("QUOTA (+BORROWING LIMIT)", field("spec.resourceGroups", fmt=_quotas)),
]
CqTenantOption = Annotated[
    str | None,
    typer.Option(
        "--tenant",
        "-t",
        help="Use the tenant's own cluster queues (tenant admin) instead of the provider's view.",
    ),
]


@cq_app.command("list")
@handles_errors
def cq_list(
    tenant: CqTenantOption = None,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Every cluster queue (platform) or a tenant's own."""
    with connect() as client:
        page = fetch(
            lambda n, a: client.list_cluster_queues(n, a, tenant=tenant), limit, after, follow
        )
    show_page(page, CQ_COLUMNS, as_json)


@cq_app.command("get")
@handles_errors
def cq_get(name: str, tenant: CqTenantOption = None, as_json: JsonOption = False) -> None:
    """One cluster queue."""
    with connect() as client:
        cq = client.get_cluster_queue(name, tenant=tenant)
    print_json(cq) if as_json else show_object(cq)


@cq_app.command("create")
@handles_errors
def cq_create(
    file: FileArgument,
    tenant: CqTenantOption = None,
    owner: Annotated[
        str | None, typer.Option("--owner", help="Provider: the tenant that owns the queue.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Create cluster queues from a file ({name, spec} or Kueue ClusterQueue documents)."""
    made = []
    with connect() as client:
        for doc in read_documents(file):
            name, spec, extra = named_spec(doc, file)
            made.append(
                client.create_cluster_queue(
                    name, spec, tenant=tenant, owner=owner or extra.get("tenant")
                )
            )
    _show_created(made, as_json, "cluster queue")


@cq_app.command("delete")
@handles_errors
def cq_delete(name: str, tenant: CqTenantOption = None, as_json: JsonOption = False) -> None:
    """Delete a cluster queue."""
    with connect() as client:
        client.delete_cluster_queue(name, tenant=tenant)
    show_done({"deleted": name}, as_json, f"cluster queue {name} deleted")


queues_app = group("queues", "A tenant's LocalQueues: where its users submit jobs.")
QUEUE_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("CLUSTER QUEUE", field("clusterQueue")),
    ("USER LIMIT", field("userLimit")),
]


@queues_app.command("list")
@handles_errors
def queues_list(
    tenant: TenantOption = None,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """The tenant's local queues."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        page = fetch(lambda n, a: client.list_local_queues(name, n, a), limit, after, follow)
    show_page(page, QUEUE_COLUMNS, as_json, title=f"queues of {name}")


@queues_app.command("get")
@handles_errors
def queues_get(queue: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """One local queue with the counts of its pending, admitted and running jobs."""
    with connect() as client:
        lq = client.get_local_queue(resolve_tenant(client, tenant), queue)
    print_json(lq) if as_json else show_object(lq)


@queues_app.command("create")
@handles_errors
def queues_create(
    queue: str,
    cluster_queue: Annotated[str, typer.Option("--cluster-queue", "-c", help="Where it feeds.")],
    user_limit: Annotated[
        int | None, typer.Option("--user-limit", min=1, help="Max admitted jobs per user.")
    ] = None,
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """Create a local queue in the tenant (tenant admin)."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        lq = client.create_local_queue(name, queue, cluster_queue, user_limit=user_limit)
    show_done(lq, as_json, f"queue {queue} created in {name} -> {cluster_queue}")


@queues_app.command("delete")
@handles_errors
def queues_delete(queue: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """Delete a local queue."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        client.delete_local_queue(name, queue)
    show_done({"tenant": name, "deleted": queue}, as_json, f"queue {queue} deleted from {name}")


pc_app = group("priority-classes", "WorkloadPriorityClasses: global and per tenant.")
PC_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("VALUE", field("value", "spec.value")),
    ("TENANT", field("tenant")),
    ("DESCRIPTION", field("description", "spec.description")),
]


@pc_app.command("list")
@handles_errors
def pc_list(
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-t", help="The tenant's own and the global ones.")
    ] = None,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Priority classes."""
    with connect() as client:
        page = fetch(
            lambda n, a: client.list_priority_classes(n, a, tenant=tenant), limit, after, follow
        )
    show_page(page, PC_COLUMNS, as_json)


@pc_app.command("create")
@handles_errors
def pc_create(
    name: str,
    value: Annotated[int, typer.Option("--value", help="Higher is admitted (and kept) first.")],
    description: Annotated[str, typer.Option("--description")] = "",
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-t", help="A class of the tenant's own.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Create a priority class: global (provider) or the tenant's own (tenant admin)."""
    with connect() as client:
        made = client.create_priority_class(name, value, description=description, tenant=tenant)
    show_done(made, as_json, f"priority class {name} = {value} created")


profiles_app = group("profiles", "Hardware profiles: the catalogue users pick from.")
PROFILE_COLUMNS: list[Column] = [
    ("NAME", field("name")),
    ("DISPLAY NAME", field("spec.displayName")),
    ("LOCAL QUEUE", field("spec.localQueue")),
    ("RESOURCES: DEFAULT [MIN-MAX]", field("spec.resources", fmt=_ranges)),
    ("OWNER", field("tenant")),
]


@profiles_app.command("list")
@handles_errors
def profiles_list(
    tenant: TenantOption = None,
    every: Annotated[
        bool, typer.Option("--every", help="Every profile of the platform (provider).")
    ] = False,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """The hardware profiles a tenant may use."""
    with connect() as client:
        name = None if every else resolve_tenant(client, tenant)
        page = fetch(
            lambda n, a: client.list_hardware_profiles(n, a, tenant=name), limit, after, follow
        )
    show_page(page, PROFILE_COLUMNS, as_json)


@profiles_app.command("get")
@handles_errors
def profiles_get(profile: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """One hardware profile, as the tenant sees it."""
    with connect() as client:
        hp = client.get_hardware_profile(profile, tenant=resolve_tenant(client, tenant))
    print_json(hp) if as_json else show_object(hp)


kueue_app = group("kueue", "Kueue v1beta2 YAML in and out, unchanged.")


@kueue_app.command("import")
@handles_errors
def kueue_import(
    file: Annotated[Path, typer.Argument(help="Kueue YAML (multi-document); '-' for stdin.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate only.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Import ResourceFlavors, Cohorts, ClusterQueues, LocalQueues and priority classes."""
    with connect() as client:
        result = client.import_kueue(read_text(file), dry_run=dry_run)
    if as_json:
        print_json(result)
    elif isinstance(result, Mapping):
        show_object(result, title="dry run: nothing stored" if dry_run else "imported")
    else:
        typer.echo(_cell(result))


@kueue_app.command("export")
@handles_errors
def kueue_export(
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here instead of stdout.")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Every governance object as Kueue YAML."""
    with connect() as client:
        text = client.export_kueue()
    if as_json:
        print_json([d for d in yaml.safe_load_all(text) if d is not None])
    elif output is not None:
        output.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {output}", err=True)
    else:
        typer.echo(text, nl=not text.endswith("\n"))


# -- jobs and workloads -----------------------------------------------------------------------

jobs_app = group("jobs", "Submit and follow jobs.")
JOB_COLUMNS: list[Column] = [
    ("ID", field("id")),
    ("NAME", field("name")),
    ("KIND", field("kind")),
    ("QUEUE", field("queue")),
    ("STATE", field("state")),
    ("USER", field("user")),
    ("GPUS", field("gpus")),
    ("SUBMITTED", field("createdAt", fmt=_short_when)),
]


@jobs_app.command("submit")
@handles_errors
def jobs_submit(
    file: FileArgument,
    tenant: TenantOption = None,
    idempotency_key: Annotated[
        str | None,
        typer.Option("--idempotency-key", help="Resubmitting the same key never makes two jobs."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Submit the job spec(s) of a YAML file (several documents: several jobs)."""
    docs = read_documents(file)
    if idempotency_key is not None:
        if len(docs) != 1:
            raise UsageError("--idempotency-key needs a file with exactly one job")
        docs[0]["idempotencyKey"] = idempotency_key
    with connect() as client:
        name = resolve_tenant(client, tenant)
        jobs = [client.submit_job(name, doc) for doc in docs]
    if as_json:
        print_json(jobs[0] if len(jobs) == 1 else jobs)
    else:
        show_table(jobs, JOB_COLUMNS, title=f"submitted to {name}")


@jobs_app.command("list")
@handles_errors
def jobs_list(
    tenant: TenantOption = None,
    state: Annotated[str | None, typer.Option("--state")] = None,
    queue: Annotated[str | None, typer.Option("--queue")] = None,
    kind: Annotated[str | None, typer.Option("--kind")] = None,
    user: Annotated[str | None, typer.Option("--user")] = None,
    all_tenants: Annotated[
        bool, typer.Option("--all-tenants", help="Jobs of every tenant (platform roles).")
    ] = False,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """The tenant's jobs (a tenant user sees only its own)."""
    with connect() as client:
        if all_tenants:
            page = fetch(
                lambda n, a: client.list_all_jobs(n, a, tenant=tenant, state=state),
                limit,
                after,
                follow,
            )
            columns = [("TENANT", field("tenant")), *JOB_COLUMNS]
        else:
            name = resolve_tenant(client, tenant)
            page = fetch(
                lambda n, a: client.list_jobs(
                    name, n, a, state=state, queue=queue, kind=kind, user=user
                ),
                limit,
                after,
                follow,
            )
            columns = JOB_COLUMNS
    show_page(page, columns, as_json)


@jobs_app.command("get")
@handles_errors
def jobs_get(job_id: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """One job: its spec, state, and where it runs."""
    with connect() as client:
        job = client.get_job(resolve_tenant(client, tenant), job_id)
    print_json(job) if as_json else show_object(job)


@jobs_app.command("cancel")
@handles_errors
def jobs_cancel(job_id: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """Cancel a job (pending or running)."""
    with connect() as client:
        job = client.cancel_job(resolve_tenant(client, tenant), job_id)
    state = job.get("state") if isinstance(job, Mapping) else None
    message = (
        f"job {job_id} cancelled"
        if state == "Cancelled"
        else f"job {job_id}: cancel requested (state now {state}; the reconciler stops it)"
    )
    show_done(job, as_json, message)


EVENT_COLUMNS: list[Column] = [
    ("TIME", field("at", "time", fmt=_short_when)),
    ("FROM", field("fromState")),
    ("TO", field("toState", "state")),
    ("REASON", field("reason", "message")),
]


@jobs_app.command("events")
@handles_errors
def jobs_events(job_id: str, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """What happened to a job, oldest first."""
    with connect() as client:
        events = client.job_events(resolve_tenant(client, tenant), job_id)
    if as_json:
        print_json(events)
    else:
        show_table(events, EVENT_COLUMNS, title=f"events of job {job_id}")


workloads_app = group("workloads", "The admission view of a tenant's jobs.")
WORKLOAD_COLUMNS: list[Column] = [
    ("JOB", field("id")),
    ("NAME", field("name")),
    ("QUEUE", field("queue")),
    ("CLUSTER QUEUE", field("clusterQueue")),
    ("STATE", field("state")),
    ("FLAVORS", field("flavors")),
    ("REASON", field("reason")),
]


@workloads_app.command("list")
@handles_errors
def workloads_list(
    tenant: TenantOption = None,
    limit: LimitOption = 100,
    after: AfterOption = None,
    follow: AllOption = False,
    as_json: JsonOption = False,
) -> None:
    """Workloads: queue, cluster queue, state, why pending, flavors assigned."""
    with connect() as client:
        name = resolve_tenant(client, tenant)
        page = fetch(lambda n, a: client.list_workloads(name, n, a), limit, after, follow)
    show_page(page, WORKLOAD_COLUMNS, as_json, title=f"workloads of {name}")
