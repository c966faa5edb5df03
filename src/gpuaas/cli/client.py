"""What the client commands share, and ``gpuaas login`` / ``whoami``. The groups of commands per
kind of API object live beside it: ``client_identity``, ``client_fleet``, ``client_governance``
and ``client_jobs``.

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
from gpuaas.model.document import mapping
from gpuaas.model.errors import InvalidValue

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


def error_line(error: Mapping[str, Any]) -> str:
    """``field: message``; an error of a batch names its document first (counting from 1)."""
    line = f"{error['field']}: {error['message']}"
    if isinstance(error.get("document"), int):
        name = f" ({error['name']})" if error.get("name") else ""
        line = f"document {error['document'] + 1}{name}: {line}"
    return line


def handles_errors(command: Callable[P, R]) -> Callable[P, R]:
    """Turn API, configuration, connection and input errors into one line on stderr."""

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except ApiError as exc:
            lines = [error_line(e) for e in exc.errors]
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


def when_text(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S")
    return "" if value is None else str(value)


def short_when(value: Any) -> str:
    """Table cells: month-day and time (UTC), narrow enough not to wrap."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, UTC).strftime("%m-%d %H:%M:%S")
    return when_text(value)


def cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping | list):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def capacity_text(value: Any) -> str:
    """``{flavor: {resource: qty}}`` as one line per flavor."""
    if not isinstance(value, Mapping):
        return cell(value)
    return "\n".join(
        f"{flavor}: " + " ".join(f"{res}={qty}" for res, qty in (resources or {}).items())
        for flavor, resources in value.items()
    )


def quotas_text(groups: Any) -> str:
    """A ClusterQueue's resourceGroups as one line per flavor: ``h100: nvidia.com/gpu=128
    (+64)`` where ``+N`` is the borrowing limit."""
    if not isinstance(groups, list):
        return cell(groups)
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


def ranges_text(resources: Any) -> str:
    """A hardware profile's resources: ``nvidia.com/gpu=1 [1-4]`` (default [min-max])."""
    if not isinstance(resources, list):
        return cell(resources)
    return "\n".join(
        f"{r.get('name')}={r.get('default')} [{r.get('min')}-{r.get('max')}]"
        for r in resources
        if isinstance(r, Mapping)
    )


def labels_text(labels: Any) -> str:
    if not isinstance(labels, Mapping):
        return cell(labels)
    return " ".join(f"{k}={v}" for k, v in labels.items())


Column = tuple[str, Callable[[Mapping[str, Any]], Any]]


def field(*path: str, fmt: Callable[[Any], str] = cell) -> Callable[[Mapping[str, Any]], str]:
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
        typer.echo(cell(obj))
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
            text = when_text(value)
        else:
            text = cell(value)
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


def show_created(made: list[Any], as_json: bool, what: str) -> None:
    if as_json:
        print_json(made[0] if len(made) == 1 else made)
        return
    for obj in made:
        name = obj.get("name") if isinstance(obj, Mapping) else obj
        typer.echo(f"{what} {name} created")


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
        file_mapping(path, doc, f"document {index + 1}", optional=False)
    if not docs:
        raise UsageError(f"{path}: no document in the file")
    return docs


def file_mapping(path: Path, value: object, where: str, optional: bool = True) -> dict[str, Any]:
    """``value`` read as a mapping by :func:`gpuaas.model.document.mapping`, its error told as
    the file's (``FILE: FIELD: PROBLEM``)."""
    try:
        return dict(mapping(value, where, optional=optional))
    except InvalidValue as exc:
        raise UsageError(f"{path}: {exc}") from None


def named_spec(doc: Mapping[str, Any], path: Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``{name, spec, ...}`` or a Kueue object ``{kind, metadata: {name}, spec}`` ->
    (name, spec, other fields)."""
    metadata = doc.get("metadata")
    name = doc.get("name") or (metadata.get("name") if isinstance(metadata, Mapping) else None)
    if not isinstance(name, str) or not name:
        raise UsageError(f"{path}: missing name (give `name:` or `metadata.name`)")
    spec = file_mapping(path, doc.get("spec"), "spec")
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


def parse_capacity(
    entries: list[str], option: str = "--capacity"
) -> dict[str, dict[str, str]] | None:
    """``flavor:resource=quantity`` (repeatable) -> ``{flavor: {resource: quantity}}``."""
    if not entries:
        return None
    capacity: dict[str, dict[str, str]] = {}
    for entry in entries:
        flavor, _, rest = entry.partition(":")
        resource, _, quantity = rest.partition("=")
        if not (flavor and resource and quantity):
            raise UsageError(
                f"{option} {entry!r}: use flavor:resource=quantity, e.g. h100:nvidia.com/gpu=64"
            )
        capacity.setdefault(flavor, {})[resource] = quantity
    return capacity


def parse_limits(entries: list[str], option: str) -> dict[str, str] | None:
    """``resource=quantity`` (repeatable) -> ``{resource: quantity}``."""
    if not entries:
        return None
    limits: dict[str, str] = {}
    for entry in entries:
        resource, _, quantity = entry.partition("=")
        if not (resource and quantity):
            raise UsageError(f"{option} {entry!r}: use resource=quantity, e.g. nvidia.com/gpu=16")
        limits[resource] = quantity
    return limits


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
