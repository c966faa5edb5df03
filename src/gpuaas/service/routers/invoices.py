"""Invoices, showback, the allocation view and the FOCUS export (docs/billing.md).

A tenant's members read its invoices and showback; the provider-admin adds credits and
adjustments and closes months (it bills the tenants); the allocation view is the provider's
(platform roles). Budgets are a kind of the one resource table (``/v1/tenants/{t}/budgets``).
"""

from __future__ import annotations

import io
import time
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response

from gpuaas.billing.focus import invoice_id, write_csv
from gpuaas.billing.periods import month_of
from gpuaas.service import invoicing
from gpuaas.service.auth import Need, require_platform, tenant_for
from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.models.budgets import AllocationOut, InvoiceLineIn, InvoiceOut, ShowbackRow
from gpuaas.service.models.common import PERIOD_PATTERN

router = APIRouter(prefix="/v1", tags=["billing"])
#: a month ``YYYY-MM`` in the path, as the document says it (``invoicing.period_named`` matches
#: the same pattern, with its own message)
Month = Annotated[
    str, Path(description="the month, YYYY-MM (UTC)", json_schema_extra={"pattern": PERIOD_PATTERN})
]


@router.get("/tenants/{tenant}/invoices", response_model=list[InvoiceOut])
def list_invoices(tenant: str, session: SessionDep, p: PrincipalDep) -> list[InvoiceOut]:
    """Every month of the tenant with usage or lines, up to the current one (open or
    closed), oldest first."""
    t = tenant_for(session, p, tenant, Need.READ)
    found = invoicing.invoices_of(session, t.name, time.time())
    return [invoicing.invoice_out(session, i) for i in found]


@router.get("/tenants/{tenant}/invoices/{period}", response_model=InvoiceOut)
def get_invoice(tenant: str, period: Month, session: SessionDep, p: PrincipalDep) -> InvoiceOut:
    """The tenant's invoice for month ``period`` (``YYYY-MM``, UTC): one line per SKU and
    price entry, credits, adjustments, late usage of closed months."""
    t = tenant_for(session, p, tenant, Need.READ)
    return invoicing.invoice_out(session, invoicing.invoice_of(session, t.name, period))


@router.post("/tenants/{tenant}/invoices/{period}/lines", response_model=InvoiceOut,
             status_code=201)  # fmt: skip
def add_invoice_line(
    tenant: str, period: Month, body: InvoiceLineIn, session: SessionDep, p: PrincipalDep
) -> InvoiceOut:
    """A credit or an adjustment on an open month, as a new line (provider-admin); a closed
    month is 409 naming ``period``: nothing billed changes."""
    require_platform(p, write=True)
    t = tenant_for(session, p, tenant, Need.READ)
    invoice = invoicing.add_line(session, t.name, period, body, p.user, time.time())
    return invoicing.invoice_out(session, invoice)


@router.post("/tenants/{tenant}/invoices/{period}/close", response_model=InvoiceOut)
def close_invoice(tenant: str, period: Month, session: SessionDep, p: PrincipalDep) -> InvoiceOut:
    """Close an ended month (provider-admin): its lines are stored and never change; usage
    recorded for it later is billed on the next open month as late usage."""
    require_platform(p, write=True)
    t = tenant_for(session, p, tenant, Need.READ)
    invoice = invoicing.close(session, t.name, period, p.user, time.time())
    return invoicing.invoice_out(session, invoice)


_FOCUS = {
    "description": "the FOCUS rows: CSV, or Parquet with ?format=parquet",
    "content": {
        "text/csv": {"schema": {"type": "string"}},
        "application/vnd.apache.parquet": {"schema": {"type": "string", "format": "binary"}},
    },
}


@router.get("/tenants/{tenant}/invoices/{period}/focus", responses={200: _FOCUS})
def export_focus(
    tenant: str,
    period: Month,
    session: SessionDep,
    p: PrincipalDep,
    format: Annotated[Literal["csv", "parquet"], Query(description="csv or parquet")] = "csv",
) -> Response:
    """The invoice as FOCUS 1.2 rows (CSV or Parquet): their BilledCost sums to its total."""
    t = tenant_for(session, p, tenant, Need.READ)
    rows = invoicing.focus_of(session, t, period)
    name = invoice_id(invoicing.invoice_of(session, t.name, period))
    if format == "parquet":
        import pyarrow.parquet as pq

        from gpuaas.billing.focus import arrow_table

        out = io.BytesIO()
        pq.write_table(arrow_table(rows), out)
        return Response(
            out.getvalue(), media_type="application/vnd.apache.parquet",
            headers={"Content-Disposition": f'attachment; filename="{name}.parquet"'},
        )  # fmt: skip
    text = io.StringIO()
    write_csv(text, rows)
    return Response(
        text.getvalue(), media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}.csv"'},
    )  # fmt: skip


@router.get("/tenants/{tenant}/showback", response_model=list[ShowbackRow])
def showback(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    period: Annotated[
        str | None,
        Query(
            description="the month, YYYY-MM (default: now)",
            json_schema_extra={"pattern": PERIOD_PATTERN},
        ),
    ] = None,
    by: Annotated[
        str,
        Query(
            description="user, queue, cluster, job or sku",
            json_schema_extra={"enum": list(invoicing.SHOWBACK)},
        ),
    ] = "user",
) -> list[ShowbackRow]:
    """What the tenant's month cost, by user, queue, cluster, job or SKU."""
    t = tenant_for(session, p, tenant, Need.READ)
    label = period or month_of(time.time()).label
    return invoicing.showback(session, t.name, label, by)


@router.get("/allocation", response_model=AllocationOut)
def allocation(
    session: SessionDep,
    p: PrincipalDep,
    start: Annotated[
        float | None, Query(description="POSIX seconds (default: end - 1 day)")
    ] = None,
    end: Annotated[float | None, Query(description="POSIX seconds (default: now)")] = None,
    aggregate: Annotated[str, Query(description="tenant, user, queue, cluster or job")] = "tenant",
    include_idle: Annotated[bool, Query(alias="includeIdle")] = True,
    share_idle: Annotated[bool, Query(alias="shareIdle")] = False,
) -> AllocationOut:
    """The fleet's capacity over ``[start, end)``, allocated and idle, in OpenCost's spirit:
    per SKU, allocated + idle = capacity (platform roles)."""
    require_platform(p, write=False)
    end = time.time() if end is None else end
    start = end - 86400 if start is None else start
    return invoicing.allocation(session, start, end, aggregate, include_idle, share_idle)
