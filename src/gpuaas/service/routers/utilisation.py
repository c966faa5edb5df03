"""GPU utilisation read from the rolling windows (docs/telemetry.md), with the access of the
things they belong to: a node's is the provider's (as the node is), a job's is whoever may
read the job (a tenant-user: their own jobs), a cluster's whoever may read the cluster. A
job or cluster of another tenant is a 404, as the job or cluster itself is."""

from __future__ import annotations

from fastapi import APIRouter, Request

from gpuaas.model.telemetry import UtilSummary
from gpuaas.service import clusters, fleet
from gpuaas.service.auth import Need, require_platform, tenant_for
from gpuaas.service.cluster_names import label_value
from gpuaas.service.dcgm_scrape import exporter_url
from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.models.common import ReasonView
from gpuaas.service.models.utilisation import (
    ClusterNodeWindowOut,
    ClusterUtilizationOut,
    DeviceWindowOut,
    JobUtilizationOut,
    NodeUtilizationOut,
    TelemetryCondition,
    WindowOut,
)
from gpuaas.service.routers.jobs import _job as readable_job
from gpuaas.service.utilisation import NodeCondition, Utilisation

router = APIRouter(tags=["telemetry"])


def _reader(request: Request) -> Utilisation:
    utilisation: Utilisation = request.app.state.utilisation
    return utilisation


def _window(summary: UtilSummary | None) -> WindowOut | None:
    return None if summary is None else WindowOut.of(summary)


def _condition(c: NodeCondition | None) -> TelemetryCondition | None:
    if c is None:
        return None
    reason = ReasonView(code=c.reason.code.value, message=c.reason.render(),
                        fields=dict(c.reason.fields))  # fmt: skip
    return TelemetryCondition(reason=reason, since=c.at)


@router.get("/v1/nodes/{name}/utilization", response_model=NodeUtilizationOut)
def node_utilization(
    name: str, request: Request, session: SessionDep, p: PrincipalDep
) -> NodeUtilizationOut:
    """The node's devices over the rolling window, the jobs holding each, and why its
    telemetry is missing or partial (its dcgm-exporter's condition)."""
    require_platform(p, write=False)
    row = fleet.get_node(session, name)
    node = fleet.nodes_from_rows([row])[0]
    u = _reader(request)
    devices = [
        DeviceWindowOut(node=r.node, device=r.device, source=r.source.value,
                        memoryTotalBytes=r.memory_total_bytes, jobs=list(r.jobs),
                        window=WindowOut.of(r.summary))
        for r in u.node_rows(name)
    ]  # fmt: skip
    return NodeUtilizationOut(
        node=name,
        windowSeconds=u.window,
        staleAfterSeconds=u.stale_after,
        dcgmExporter=exporter_url(node),
        window=_window(u.node(name)),
        condition=_condition(u.condition(name)),
        devices=devices,
    )


@router.get("/v1/tenants/{tenant}/jobs/{job_id}/utilization", response_model=JobUtilizationOut)
def job_utilization(
    tenant: str, job_id: int, request: Request, session: SessionDep, p: PrincipalDep
) -> JobUtilizationOut:
    """The job's devices over the rolling window (all null while it holds none)."""
    owner = tenant_for(session, p, tenant, Need.READ)
    job = readable_job(session, p, owner, job_id)
    u = _reader(request)
    holding = u.holding(job.id)
    devices = [] if holding is None else [
        DeviceWindowOut(node=n, device=d, window=_window(u.device(n, d)))
        for n, d in holding.devices
    ]  # fmt: skip
    return JobUtilizationOut(
        job=job.id,
        tenant=owner.name,
        cluster=job.spec.get("cluster"),
        windowSeconds=u.window,
        window=_window(u.job(job.id)) if holding is not None else None,
        devices=devices,
    )


@router.get(
    "/v1/tenants/{tenant}/clusters/{name}/utilization", response_model=ClusterUtilizationOut
)
def cluster_utilization(
    tenant: str, name: str, request: Request, session: SessionDep, p: PrincipalDep
) -> ClusterUtilizationOut:
    """The cluster's nodes over the rolling window, idle devices included."""
    owner = tenant_for(session, p, tenant, Need.READ)
    row = clusters.get_cluster(session, owner, name)
    u = _reader(request)
    nodes = [r.node for r in clusters.node_rows(session, row.id)]
    return ClusterUtilizationOut(
        cluster=row.name,
        tenant=owner.name,
        windowSeconds=u.window,
        window=_window(u.cluster(label_value(owner.name, row.name))),
        nodes=[ClusterNodeWindowOut(node=n, window=_window(u.node(n))) for n in nodes],
    )
