"""The provider's fleet at a glance (:mod:`gpuaas.service.fleet_view`): the GPU heatmap's
data, allocation and utilisation per hour, the idle pool's size, idle GPUs and revenue, and
the tenants' grants against what they hold. Platform roles only (as the nodes are); the
console's provider pages read these, and so may any client.

The heatmap's data carries an ETag that moves whenever any of it does (the active jobs, the
fleet, the pool, the telemetry conditions): a poller sending ``If-None-Match`` gets 304."""

from __future__ import annotations

import dataclasses
import json
import time
from typing import Any

from fastapi import APIRouter, Query, Request, Response

from gpuaas.service import fleet_view
from gpuaas.service.auth import require_platform
from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.idle_pool import pool_row, pool_view
from gpuaas.service.models.common import MAX_LIMIT

router = APIRouter(prefix="/v1/fleet", tags=["fleet"])


def _json(body: Any, headers: dict[str, str] | None = None) -> Response:
    text = json.dumps(body, separators=(",", ":"))
    return Response(text, media_type="application/json", headers=headers)


def conditions_of(request: Request) -> set[str]:
    """Nodes whose telemetry reports a condition (the utilisation reader's)."""
    reader = getattr(request.app.state, "utilisation", None)
    return set(reader.conditions()) if reader is not None else set()


@router.get("/picture", response_model=None)
def picture(request: Request, session: SessionDep, p: PrincipalDep) -> Response:
    """Every node's GPUs as parts coloured by owner (tenant, cluster, idle pool, free,
    unavailable), grouped by rack and NVLink domain: ``legend`` and ``groups`` (see
    :func:`gpuaas.service.fleet_view.fleet_picture`). 304 when ``If-None-Match`` matches."""
    require_platform(p, write=False)
    tag, text = fleet_view.picture_text(session, conditions_of(request))
    etag = f'"{tag}"'
    headers = {"ETag": etag, "Cache-Control": "no-cache"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(text, media_type="application/json", headers=headers)


@router.get("/history", response_model=None)
def history(
    session: SessionDep,
    p: PrincipalDep,
    hours: int = Query(24, ge=1, le=24 * 31, description="UTC hours back, the current one last"),
) -> Response:
    """Allocated and utilised share of the fleet's GPUs per UTC hour (``start`` and ``step``
    in seconds; ``measured``: the share of the held GPU-time that had telemetry)."""
    require_platform(p, write=False)
    series = fleet_view.over_time(session, time.time(), hours)
    return _json(dataclasses.asdict(series))


@router.get("/idle", response_model=None)
def idle(session: SessionDep, p: PrincipalDep) -> Response:
    """The idle pool (as ``GET /v1/idle-pools/{name}`` shows it; null when there is none),
    its revenue by month and currency (amounts in the currency's units, as strings), and
    the free GPU capacity of the shared fleet by model (GPUs, shares summed)."""
    require_platform(p, write=False)
    row = pool_row(session)
    pool = pool_view(session, row).model_dump(mode="json") if row is not None else None
    revenue = [
        {
            "period": r.period,
            "currency": r.currency,
            "records": r.records,
            "gpuHours": round(r.gpu_hours, 3),
            "amount": f"{r.amount_nano / 1e9:.2f}",
        }
        for r in fleet_view.pool_revenue(session)
    ]
    free = fleet_view.idle_gpus(fleet_view.fleet_picture(session))
    return _json({"pool": pool, "revenue": revenue, "idleGpus": free})


@router.get("/tenants", response_model=None)
def tenants(
    session: SessionDep,
    p: PrincipalDep,
    limit: int = Query(50, ge=1, le=MAX_LIMIT),
    after: str | None = Query(None, description="the `next` cursor of the previous page"),
) -> Response:
    """Tenants by name with their grants (flavor -> resource -> amount), borrowing and
    lending limits, the GPUs they hold now, running and pending jobs and cluster nodes."""
    require_platform(p, write=False)
    lines = [t for t in fleet_view.tenant_lines(session) if after is None or t.name > after]
    page = lines[:limit]
    items = [
        {
            "name": t.name,
            "displayName": t.display_name,
            "grants": t.grants,
            "grantedGpus": t.granted_gpus,
            "borrowing": t.borrowing,
            "lending": t.lending,
            "heldGpus": t.held_gpus,
            "running": t.running,
            "pending": t.pending,
            "clusters": t.clusters,
            "clusterNodes": t.cluster_nodes,
            "nodeLimit": t.node_limit,
        }
        for t in page
    ]
    return _json({"items": items, "next": page[-1].name if len(lines) > limit else None})
