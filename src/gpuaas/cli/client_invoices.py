"""``gpuaas invoices``: a tenant's invoices, credits and adjustments, closing a month, the
FOCUS export, showback and the fleet's allocation view (docs/billing.md). ``gpuaas budgets``
comes from the one resource table (:mod:`gpuaas.cli.client_governance`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from gpuaas.cli.client import (
    JsonOption,
    TenantOption,
    connect,
    field,
    group,
    handles_errors,
    print_json,
    resolve_tenant,
    show_table,
)

invoices_app = group("invoices", "Invoices per tenant and month, showback, FOCUS export.")

PeriodArg = Annotated[str, typer.Argument(help="The month, YYYY-MM (UTC).")]
LINE_COLUMNS = [
    ("KIND", field("kind")),
    ("DESCRIPTION", field("description")),
    ("SKU", field("sku")),
    ("PRICE", field("priceId")),
    ("QUANTITY", field("quantity")),
    ("UNIT", field("unit")),
    ("BILLED", field("billedCost")),
    ("FOR", field("forPeriod")),
]
INVOICE_COLUMNS = [
    ("PERIOD", field("period")),
    ("STATE", field("state")),
    ("TOTAL", field("total")),
    ("CURRENCY", field("currency")),
    ("LINES", lambda i: str(len(i.get("lines", [])))),
]


def _show(invoice: dict, as_json: bool) -> None:
    if as_json:
        print_json(invoice)
        return
    title = (
        f"invoice {invoice['tenant']} {invoice['period']} ({invoice['state']}): "
        f"{invoice['total']} {invoice['currency']}"
    )
    show_table(invoice.get("lines", []), LINE_COLUMNS, title=title)


@invoices_app.command("list")
@handles_errors
def list_(tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """Every month of the tenant, open or closed."""
    with connect() as client:
        scope = resolve_tenant(client, tenant)
        found = client.list_invoices(scope)
    if as_json:
        print_json(found)
        return
    show_table(found, INVOICE_COLUMNS, title=f"invoices of {scope}")


@invoices_app.command("get")
@handles_errors
def get(period: PeriodArg, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """One month's invoice: a line per SKU and price, credits, adjustments, late usage."""
    with connect() as client:
        _show(client.get_invoice(resolve_tenant(client, tenant), period), as_json)


def _add(kind: str, period: str, amount: str, description: str, tenant: str | None,
         as_json: bool) -> None:  # fmt: skip
    with connect() as client:
        scope = resolve_tenant(client, tenant)
        _show(client.add_invoice_line(scope, period, kind, amount, description), as_json)


DescriptionOption = Annotated[str, typer.Option("--description", "-d", help="What it is for.")]
AmountArg = Annotated[str, typer.Argument(help="The amount (decimal, not negative).")]


@invoices_app.command("credit")
@handles_errors
def credit(
    period: PeriodArg, amount: AmountArg, description: DescriptionOption,
    tenant: TenantOption = None, as_json: JsonOption = False,
) -> None:  # fmt: skip
    """Credit an open month (a new line, taken off; provider-admin)."""
    _add("credit", period, amount, description, tenant, as_json)


@invoices_app.command("adjust")
@handles_errors
def adjust(
    period: PeriodArg, amount: AmountArg, description: DescriptionOption,
    tenant: TenantOption = None, as_json: JsonOption = False,
) -> None:  # fmt: skip
    """Add an adjustment to an open month (a new line; provider-admin)."""
    _add("adjustment", period, amount, description, tenant, as_json)


@invoices_app.command("close")
@handles_errors
def close(period: PeriodArg, tenant: TenantOption = None, as_json: JsonOption = False) -> None:
    """Close an ended month: its invoice never changes again (provider-admin)."""
    with connect() as client:
        _show(client.close_invoice(resolve_tenant(client, tenant), period), as_json)


@invoices_app.command("focus")
@handles_errors
def focus(
    period: PeriodArg,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write it.")],
    fmt: Annotated[str, typer.Option("--format", help="csv or parquet")] = "csv",
    tenant: TenantOption = None,
) -> None:
    """Export the month's invoice as FOCUS 1.2 rows (CSV or Parquet)."""
    with connect() as client:
        data = client.export_focus(resolve_tenant(client, tenant), period, fmt)
    output.write_bytes(data)
    typer.echo(f"wrote {len(data)} bytes to {output}")


@invoices_app.command("showback")
@handles_errors
def showback(
    period: PeriodArg,
    by: Annotated[str, typer.Option("--by", help="user, queue, cluster, job or sku")] = "user",
    tenant: TenantOption = None,
    as_json: JsonOption = False,
) -> None:
    """What the month cost by user, queue, cluster, job or SKU."""
    with connect() as client:
        scope = resolve_tenant(client, tenant)
        rows = client.showback(scope, period, by)
    if as_json:
        print_json(rows)
        return
    columns = [(by.upper(), field("name")), ("COST", field("cost")),
               ("LIST", field("listCost")), ("UNIT-HOURS", field("quantity"))]  # fmt: skip
    show_table(rows, columns, title=f"{scope} {period} by {by}")


@invoices_app.command("allocation")
@handles_errors
def allocation(
    hours: Annotated[float, typer.Option("--hours", help="The window: the last N hours.")] = 24,
    aggregate: Annotated[str, typer.Option("--by", help="tenant, user, queue, cluster, job")] = (
        "tenant"
    ),
    share_idle: Annotated[bool, typer.Option("--share-idle", help="Spread idle cost.")] = False,
    as_json: JsonOption = False,
) -> None:
    """The fleet's capacity cost over a window: allocated, idle and spot (platform roles)."""
    end = time.time()
    with connect() as client:
        view = client.allocation(end - hours * 3600, end, aggregate, share_idle=share_idle)
    if as_json:
        print_json(view)
        return
    columns = [("NAME", field("name")), ("SKU", field("sku")), ("HOURS", field("hours")),
               ("COST", field("cost")), ("IDLE SHARE", field("sharedIdle")),
               ("TOTAL", field("total"))]  # fmt: skip
    show_table(view["rows"], columns, title=f"allocation over the last {hours:g} h")
    if view["spot"]:
        spot = [("NAME", field("name")), ("SKU", field("sku")), ("HOURS", field("hours")),
                ("BILLED", field("billed"))]  # fmt: skip
        show_table(view["spot"], spot, title="sold from the idle pool (spot)")
