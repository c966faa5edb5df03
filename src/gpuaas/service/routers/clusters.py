"""Tenant clusters: create, list, inspect, scale, delete, print what is realised; and the
provider's terms for them (which pools a tenant may draw from, its node limit).

Writes are the tenant-admin's (and the provider-admin's); reads are any member's of the
tenant (a tenant-user needs a cluster's name and state to submit jobs to it) and the
platform roles'. A request decides and stores; the cluster worker realises
(:mod:`gpuaas.service.clusters`), so creation, scaling and deletion answer ``202 Accepted``
with the cluster as it now is (Provisioning, Scaling, Deleting).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Query, Request

from gpuaas.backends.provisioners.base import ProvisionError
from gpuaas.model.cluster import ClusterKind
from gpuaas.service import clusters
from gpuaas.service.auth import Need, require_platform, tenant_for
from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.errors import ApiError
from gpuaas.service.models.clusters import (
    AllowanceIn,
    AllowanceOut,
    ClusterEventOut,
    ClusterIn,
    ClusterOut,
    ScaleIn,
)
from gpuaas.service.provisioners import Provisioners, availability
from gpuaas.service.settings import Settings

router = APIRouter(prefix="/v1", tags=["clusters"])


def _settings(request: Request) -> Settings:
    return request.app.state.settings


@router.get("/tenants/{tenant}/clusters", response_model=list[ClusterOut])
def list_clusters(tenant: str, session: SessionDep, p: PrincipalDep) -> Any:
    """The tenant's clusters: nodes, GPUs, what its jobs hold, its jobs by state."""
    return clusters.list_clusters(session, tenant_for(session, p, tenant, Need.READ))


@router.post("/tenants/{tenant}/clusters", response_model=ClusterOut, status_code=202)
def create_cluster(
    tenant: str, body: ClusterIn, request: Request, session: SessionDep, p: PrincipalDep
) -> Any:
    """Carve a cluster from the pools the provider allows the tenant; 202 while it is
    provisioned. A pool the tenant may not use, a size beyond its node limit or its pool's
    bounds (422), or beyond the free nodes (409), names the field; nothing is stored then."""
    owner = tenant_for(session, p, tenant, Need.ADMIN)
    settings = _settings(request)
    row = clusters.create_cluster(session, owner, body, time.time(), settings, availability())
    return clusters.cluster_view(session, row, owner.name)


@router.get("/tenants/{tenant}/clusters/{name}", response_model=ClusterOut)
def get_cluster(tenant: str, name: str, session: SessionDep, p: PrincipalDep) -> Any:
    owner = tenant_for(session, p, tenant, Need.READ)
    return clusters.cluster_view(session, clusters.get_cluster(session, owner, name), owner.name)


@router.post("/tenants/{tenant}/clusters/{name}/scale", response_model=ClusterOut, status_code=202)
def scale_cluster(
    tenant: str, name: str, body: ScaleIn, request: Request, session: SessionDep, p: PrincipalDep
) -> Any:
    """New node counts for some pools: nodes are carved now, or drained (their jobs requeued
    with a grace period) and then given back; 202 while the cluster is Scaling."""
    owner = tenant_for(session, p, tenant, Need.ADMIN)
    row = clusters.scale_cluster(
        session, owner, name, body, time.time(), _settings(request).backend
    )
    return clusters.cluster_view(session, row, owner.name)


@router.delete("/tenants/{tenant}/clusters/{name}", response_model=ClusterOut, status_code=202)
def delete_cluster(
    tenant: str,
    name: str,
    session: SessionDep,
    p: PrincipalDep,
    force: bool = Query(False, description="cancel the cluster's admitted and running jobs"),
) -> Any:
    """Give the cluster's nodes back and remove it; 409 naming ``force`` while its jobs run.
    202 while it is Deleting; it is gone (404) once done."""
    owner = tenant_for(session, p, tenant, Need.ADMIN)
    if clusters.get_cluster(session, owner, name).spec.get("idlePool") is not None:
        raise ApiError(409, f"name: {clusters.IDLE_POOL_IS_THE_PROVIDERS}", "name")
    row = clusters.delete_cluster(session, owner, name, force, time.time())
    return clusters.cluster_view(session, row, owner.name)


@router.get("/tenants/{tenant}/clusters/{name}/events", response_model=list[ClusterEventOut])
def cluster_events(tenant: str, name: str, session: SessionDep, p: PrincipalDep) -> Any:
    owner = tenant_for(session, p, tenant, Need.READ)
    return clusters.cluster_events(session, clusters.get_cluster(session, owner, name))


@router.get("/tenants/{tenant}/clusters/{name}/manifest", response_model=list[dict[str, Any]])
def cluster_manifest(
    tenant: str, name: str, request: Request, session: SessionDep, p: PrincipalDep
) -> Any:
    """What the provisioner realises for the cluster now (Cluster API objects, the Slurm
    partition, the bare-metal allocation), as documents; nothing is applied."""
    owner = tenant_for(session, p, tenant, Need.ADMIN)
    row = clusters.get_cluster(session, owner, name)
    rows = clusters.node_rows(session, row.id)
    nodes = clusters.cluster_nodes(rows)
    try:
        provisioner = Provisioners(_settings(request)).get(ClusterKind(row.kind))
        return list(
            provisioner.manifest(
                clusters.spec_of(row, owner.name), nodes, clusters.hosts_of(session, nodes.all)
            )
        )
    except ProvisionError as exc:
        raise ApiError(409, f"cluster {name}: {exc}", "kind") from None


@router.get("/tenants/{tenant}/cluster-allowance", response_model=AllowanceOut)
def get_allowance(tenant: str, session: SessionDep, p: PrincipalDep) -> Any:
    """The pools the tenant may carve clusters from and its node limit (the tenant's members
    and the platform roles read them)."""
    return clusters.allowance_view(session, tenant_for(session, p, tenant, Need.READ))


@router.put("/tenants/{tenant}/cluster-allowance", response_model=AllowanceOut)
def put_allowance(tenant: str, body: AllowanceIn, session: SessionDep, p: PrincipalDep) -> Any:
    """The provider's terms for the tenant's clusters (provider-admin only)."""
    require_platform(p, write=True)
    owner = tenant_for(session, p, tenant, Need.ADMIN)
    return clusters.set_allowance(session, owner, body, time.time())
