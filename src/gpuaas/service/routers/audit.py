"""The audit log, read: the provider's whole log and a tenant-admin's own tenant's entries,
as pages of JSON or, with ``format=jsonl``, JSON lines for export."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel
from sqlalchemy import select

from gpuaas.service.audit import AuditEntry, entry_of
from gpuaas.service.auth import Need, require_platform, tenant_for
from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.models.common import ID_CURSOR_PATTERN, PAGE_BOUNDS, paginate
from gpuaas.store.tables import AuditRow

router = APIRouter(prefix="/v1", tags=["audit"])

LimitQ = Query(100, description="page size, 1-1000", json_schema_extra=PAGE_BOUNDS)
AfterQ = Query(
    None,
    description="the `next` cursor of the previous page (an id)",
    json_schema_extra={"pattern": ID_CURSOR_PATTERN},
)
FormatQ = Query(pattern="^(json|jsonl)$", description="json pages, or jsonl lines")
JSONL = {
    "description": "JSON pages, or with format=jsonl one entry per line",
    "content": {"application/x-ndjson": {"schema": {"type": "string"}}},
}


class AuditPage(BaseModel):
    items: list[AuditEntry]
    next: str | None = None


def _answer(
    session: SessionDep, stmt: object, limit: int, after: str | None, fmt: str, request: Request
) -> AuditPage | Response:
    request.app.state.audit.flush()  # what was written before this read is in it
    rows, cursor = paginate(session, stmt, AuditRow.id, limit, after)  # type: ignore[arg-type]
    entries = [entry_of(r) for r in rows]
    if fmt == "jsonl":
        headers = {"X-Next-Cursor": cursor} if cursor else None
        body = "".join(e.line() + "\n" for e in entries)
        return Response(body, media_type="application/x-ndjson", headers=headers)
    return AuditPage(items=entries, next=cursor)


@router.get("/audit", response_model=AuditPage, responses={200: JSONL})
def read_audit(
    request: Request,
    session: SessionDep,
    p: PrincipalDep,
    tenant: str | None = Query(None, description="only this tenant's entries"),
    user: str | None = Query(None, description="only this user's entries"),
    limit: int = LimitQ,
    after: str | None = AfterQ,
    format: Annotated[str, FormatQ] = "json",
) -> AuditPage | Response:
    """Every write request: who, which token, when, what object, the digests before and
    after, and the outcome (the provider: provider-admins and platform viewers)."""
    require_platform(p, write=False)
    stmt = select(AuditRow)
    if tenant is not None:
        stmt = stmt.where(AuditRow.tenant == tenant)
    if user is not None:
        stmt = stmt.where(AuditRow.user == user)
    return _answer(session, stmt, limit, after, format, request)


@router.get("/tenants/{tenant}/audit", response_model=AuditPage, responses={200: JSONL})
def read_tenant_audit(
    tenant: str,
    request: Request,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = AfterQ,
    format: Annotated[str, FormatQ] = "json",
) -> AuditPage | Response:
    """The write requests made under the tenant's paths (its tenant-admins and the provider)."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    stmt = select(AuditRow).where(AuditRow.tenant == row.name)
    return _answer(session, stmt, limit, after, format, request)
