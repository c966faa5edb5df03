"""``gpuaas usage``: usage records, their totals, and the idle pool's usage (docs/billing.md).

``list`` and ``summary`` speak for a tenant (``--tenant``, or your only tenant) or, with
``--all-tenants``, for the provider (every tenant, or ``--of`` one). ``pool`` shows the
idle-capacity pool's GPU-hours by GPU model and MIG profile (provider only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, NamedTuple

import typer

from gpuaas.cli.client import (
    JsonOption,
    TenantOption,
    connect,
    field,
    handles_errors,
    print_json,
    resolve_tenant,
    show_table,
)
from gpuaas.cli.main import app

usage_app = typer.Typer(help="Usage records, totals and cost to date; the idle pool's usage.")
app.add_typer(usage_app, name="usage")

PeriodOption = Annotated[
    str | None, typer.Option("--period", "-p", help="A billing period, YYYY-MM (UTC).")
]
StartOption = Annotated[
    str | None, typer.Option("--start", help="Window start: POSIX seconds or ISO-8601.")
]
EndOption = Annotated[str | None, typer.Option("--end", help="Window end (exclusive).")]
AllOption = Annotated[
    bool, typer.Option("--all-tenants", "-A", help="Every tenant's (provider roles).")
]
OfOption = Annotated[str | None, typer.Option("--of", help="With --all-tenants: one tenant.")]

RECORD_COLUMNS = [
    ("JOB", field("job")),
    ("POD", field("pod")),
    ("DEVICE", field("device")),
    ("NODE", field("node")),
    ("SKU", field("sku")),
    ("START", field("start")),
    ("END", field("end")),
    ("QUANTITY", field("quantity")),
    ("COST", field("effectiveCost")),
    ("CUR", field("currency")),
    ("UTIL", field("utilization")),
]


class Window(NamedTuple):
    """Whose records and when: what ``list`` and ``summary`` both take."""

    tenant: str | None
    every: bool
    of: str | None
    period: str | None
    start: str | None
    end: str | None

    def ask(self, call: Callable[..., dict[str, Any]], **more: Any) -> tuple[str | None, Any]:
        """``call(client, tenant=..., scope_tenant=..., period=..., start=..., end=...,
        **more)`` for the tenant this speaks for (None: every tenant, as the provider, or
        ``--of`` one); its scope and answer."""
        with connect() as client:
            scope = None if self.every else resolve_tenant(client, self.tenant)
            return scope, call(client, tenant=scope, scope_tenant=self.of if self.every else None,
                               period=self.period, start=self.start, end=self.end,
                               **more)  # fmt: skip


def _show(items: list[Any], columns: list[Any], scope: str | None, as_json: bool,
          raw: Any = None) -> None:  # fmt: skip
    if as_json:
        print_json(items if raw is None else raw)
        return
    show_table(items, columns, title=f"usage of {scope or 'every tenant'}")


@usage_app.command("list")
@handles_errors
def list_usage(
    tenant: TenantOption = None,
    every: AllOption = False,
    of: OfOption = None,
    period: PeriodOption = None,
    start: StartOption = None,
    end: EndOption = None,
    user: Annotated[str | None, typer.Option("--user", help="Only this user's.")] = None,
    job: Annotated[int | None, typer.Option("--job", help="Only this job's.")] = None,
    sku: Annotated[str | None, typer.Option("--sku", help="Only this SKU's.")] = None,
    limit: Annotated[int, typer.Option("--limit", help="At most this many records.")] = 100,
    as_json: JsonOption = False,
) -> None:
    """Usage records, oldest first: each device's held time, SKU, quantity and cost."""
    filters = {k: v for k, v in {"user": user, "job": job, "sku": sku}.items() if v is not None}
    window = Window(tenant, every, of, period, start, end)
    scope, page = window.ask(lambda c, **kw: c.list_usage(**kw), limit=limit, **filters)
    columns = ([("TENANT", field("tenant"))] if every else []) + [("USER", field("user"))]
    _show(page["items"], columns + RECORD_COLUMNS, scope, as_json)


@usage_app.command("summary")
@handles_errors
def summary(
    tenant: TenantOption = None,
    every: AllOption = False,
    of: OfOption = None,
    period: PeriodOption = None,
    start: StartOption = None,
    end: EndOption = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Columns to total by, comma-separated (default: sku,currency;"
            " tenant,sku,currency with --all-tenants).",
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Cost to date: usage totalled per SKU (or ``--by`` user, queue, cluster, job_id ...)."""
    groups = [g.strip() for g in by.split(",")] if by else None
    window = Window(tenant, every, of, period, start, end)
    scope, out = window.ask(lambda c, **kw: c.usage_summary(**kw), by=groups)
    columns = [(g.upper(), field(f"group.{g}")) for g in out["by"]] + [
        ("RECORDS", field("records")),
        ("UNIT-HOURS", field("unitHours")),
        ("LIST", field("listCost")),
        ("EFFECTIVE", field("effectiveCost")),
    ]
    _show(out["totals"], columns, scope, as_json, raw=out)


@usage_app.command("pool")
@handles_errors
def pool(period: PeriodOption = None, as_json: JsonOption = False) -> None:
    """GPU-hours sold from the idle-capacity pool, by period, GPU model and MIG profile."""
    with connect() as client:
        out = client.idle_pool_usage(period)
    if as_json:
        print_json(out["items"])
        return
    columns = [
        ("PERIOD", field("period")),
        ("GPU MODEL", field("gpuModel")),
        ("SHAPE", field("shape")),
        ("PROFILE", field("profile")),
        ("GPU-HOURS", field("gpuHours")),
        ("RECORDS", field("records")),
    ]
    show_table(out["items"], columns, title="idle-pool usage")
