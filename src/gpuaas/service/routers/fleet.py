"""The provider's fleet: register nodes, cordon, drain, repartition and remove them.

Nodes are written in the inventory format (docs/inventory.md) and read back with their GPUs,
what they advertise, and (one node at a time) the pods placed on them.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Body, Query, Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.model.node import Node
from gpuaas.model.resources import format_amount
from gpuaas.service import fleet
from gpuaas.service.auth import require_platform
from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.errors import invalid
from gpuaas.service.models.common import MAX_LIMIT, PAGE_BOUNDS, Page
from gpuaas.service.models.fleet import (
    GpuOut,
    MigInstanceOut,
    NicOut,
    NodeOut,
    NodesApplied,
    PartitionIn,
    PartitionOut,
    PodOnNode,
    TaintOut,
)
from gpuaas.store.tables import NodeRow, Tenant
from gpuaas.supply.nics import nic_affinity
from gpuaas.supply.partition import advertised_resources

router = APIRouter(prefix="/v1/nodes", tags=["fleet"])

POOL_LABEL = "gpuaas.io/pool"
_BATCH = 500
#: Larger fleets are registered from a file at start-up (``gpuaas serve --fleet``).
MAX_NODES_PER_REQUEST = 10_000


def _gpus(node: Node) -> list[GpuOut]:
    return [
        GpuOut(
            index=g.index,
            uuid=g.uuid,
            model=g.model,
            memory_mib=g.memory_mib,
            numa_node=g.numa_node,
            pcie_root=g.pcie_root,
            partition=PartitionOut(
                mode=str(g.partition.mode),
                config=g.partition.config,
                replicas=g.partition.replicas,
                instances=[
                    MigInstanceOut(profile=i.profile, start=i.start, size=i.size)
                    for i in g.partition.instances
                ],
            ),
        )
        for g in node.gpus
    ]


def _nics(node: Node) -> list[NicOut]:
    affinity = {a.nic: a for a in nic_affinity(node)}
    return [
        NicOut(
            name=n.name,
            pool=n.pool,
            link=n.link.value,
            speed_gbps=n.speed_gbps,
            rdma=n.rdma,
            vfs=n.vfs,
            pcie_root=n.pcie_root,
            numa_node=n.numa_node,
            rail=n.rail,
            fabric=n.fabric,
            pci_address=n.pci_address,
            pcie_gpus=list(affinity[n.name].pcie),
            numa_gpus=list(affinity[n.name].numa),
        )
        for n in node.nics
    ]


def node_out(row: NodeRow, node: Node, allocated: list[PodOnNode] | None = None) -> NodeOut:
    topology = node.topology.known()
    return NodeOut(
        name=row.name,
        cordoned=row.cordoned,
        draining=row.draining,
        gpu_model=node.gpu_model,
        gpu_count=len(node.gpus),
        allocatable={k: format_amount(k, v) for k, v in advertised_resources(node).items()},
        topology=topology,
        labels=node.labels,
        taints=[TaintOut(key=t.key, value=t.value, effect=str(t.effect)) for t in node.taints],
        gpus=_gpus(node),
        nics=_nics(node),
        spec=row.spec,
        allocated=allocated,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _matches(row: NodeRow, node: Node, model: str | None, pool: str | None) -> bool:
    if model is not None:
        raw = str((row.spec.get("gpus") or {}).get("model", "")).lower()
        if model.lower() not in (node.gpu_model.lower(), raw):
            return False
    return pool is None or node.labels.get(POOL_LABEL) == pool


@router.get("", response_model=Page[NodeOut])
def list_nodes(
    session: SessionDep,
    p: PrincipalDep,
    model: str | None = Query(None, description="GPU model (catalogue name or as registered)"),
    cordoned: bool | None = Query(None),
    pool: str | None = Query(None, description=f"the {POOL_LABEL} label"),
    limit: int = Query(100, description="page size, 1-1000", json_schema_extra=PAGE_BOUNDS),
    after: str | None = Query(
        None, min_length=1, description="the `next` cursor of the previous page"
    ),
) -> Page[NodeOut]:
    """Nodes by name, filtered; cordoned and draining nodes carry the unschedulable taint."""
    require_platform(p, write=False)
    if limit < 1 or limit > MAX_LIMIT:
        raise invalid("limit", f"must be between 1 and {MAX_LIMIT}, got {limit}")
    stmt = select(NodeRow).order_by(NodeRow.name)
    if cordoned is not None:
        stmt = stmt.where(NodeRow.cordoned.is_(cordoned))
    items: list[NodeOut] = []
    cursor = fleet.text_cursor(after)
    # without a filter read on the rows, one more row than the page tells whether one follows
    batch = _BATCH if model is not None or pool is not None else limit + 1
    while True:
        batch_stmt = stmt if cursor is None else stmt.where(NodeRow.name > cursor)
        rows = list(session.scalars(batch_stmt.limit(batch)))
        for row, node in zip(rows, fleet.nodes_from_rows(rows), strict=True):
            if _matches(row, node, model, pool):
                if len(items) == limit:
                    return Page(items=items, next=items[-1].name)
                items.append(node_out(row, node))
        if len(rows) < batch:
            return Page(items=items, next=None)
        cursor = rows[-1].name


def _allocated(session: Session, name: str) -> list[PodOnNode]:
    pods = fleet.placements_on(session, name)
    tenants = dict(session.execute(select(Tenant.id, Tenant.name)).all()) if pods else {}
    return [
        PodOnNode(
            job_id=job.id,
            tenant=tenants.get(job.tenant_id, str(job.tenant_id)),
            state=job.state,
            pod_set=pod.get("podSet"),
            index=pod.get("index"),
            assignment=pod.get("assignment"),
        )
        for job, pod in pods
    ]


def _one(session: Session, row: NodeRow) -> NodeOut:
    node = fleet.nodes_from_rows([row])[0]
    return node_out(row, node, _allocated(session, row.name))


@router.get("/{name}", response_model=NodeOut)
def get_node(name: str, session: SessionDep, p: PrincipalDep) -> NodeOut:
    """One node with its GPUs and the pods placed on it."""
    require_platform(p, write=False)
    return _one(session, fleet.get_node(session, name))


@router.post("", response_model=list[NodeOut], status_code=201)
def register(
    session: SessionDep,
    p: PrincipalDep,
    body: dict[str, Any] = Body(
        ...,
        description="one inventory `nodes:` entry (docs/inventory.md; `count` and name "
        "patterns make several nodes), a whole inventory (`kind: Fleet`), Kubernetes Node "
        "objects (`kind: Node`, `NodeList` or `List`, as `kubectl get nodes -o json` prints "
        'them), or a fleet file\'s text `{"content": TEXT, "source": "nodes.csv"}` in any '
        "format `gpuaas fleet show` reads (the source's extension picks CSV, JSON or YAML)",
    ),
) -> list[NodeOut]:
    """Register nodes, all or none; 409 when a name is taken."""
    require_platform(p, write=True)
    entries, defaults = _bounded_entries(body)
    rows = fleet.register_nodes(session, entries, time.time(), defaults)
    return [node_out(r, n) for r, n in zip(rows, fleet.nodes_from_rows(rows), strict=True)]


def _bounded_entries(body: dict[str, Any]) -> tuple[list[Any], dict[str, Any] | None]:
    entries, defaults = fleet.request_entries(body)
    for number, entry in enumerate(entries):
        count = entry.get("count", 1) if isinstance(entry, dict) else 1
        if isinstance(count, int) and count > MAX_NODES_PER_REQUEST:
            where = "count" if len(entries) == 1 else f"nodes[{number}].count"
            raise invalid(where, f"at most {MAX_NODES_PER_REQUEST} nodes per request, got {count}")
    if len(entries) > MAX_NODES_PER_REQUEST:
        raise invalid("nodes", f"at most {MAX_NODES_PER_REQUEST} nodes per request")
    return entries, defaults


@router.put("", response_model=NodesApplied)
def apply(
    session: SessionDep,
    p: PrincipalDep,
    body: dict[str, Any] = Body(
        ..., description="what `POST /v1/nodes` takes (inventory entries, a Fleet, Node objects)"
    ),
) -> NodesApplied:
    """Register or replace nodes, all or none: new names are registered, stored ones replaced
    in place (their cordon and drain state kept; the reconciler applies the change as a fleet
    diff), identical ones left alone. What a repeated `gpuaas nodes import` sends."""
    require_platform(p, write=True)
    entries, defaults = _bounded_entries(body)
    done = fleet.apply_nodes(session, entries, time.time(), defaults)
    return NodesApplied(created=done.created, updated=done.updated, unchanged=done.unchanged)


@router.post("/{name}/cordon", response_model=NodeOut)
def cordon(name: str, session: SessionDep, p: PrincipalDep) -> NodeOut:
    """No new pods go there; pods already there keep running."""
    require_platform(p, write=True)
    return _one(session, fleet.set_schedulable(session, name, time.time(), cordoned=True))


@router.post("/{name}/uncordon", response_model=NodeOut)
def uncordon(name: str, session: SessionDep, p: PrincipalDep) -> NodeOut:
    require_platform(p, write=True)
    return _one(session, fleet.set_schedulable(session, name, time.time(), cordoned=False))


@router.post("/{name}/drain", response_model=NodeOut)
def drain(name: str, session: SessionDep, p: PrincipalDep) -> NodeOut:
    """Cordon, and the reconciler requeues the jobs running there."""
    require_platform(p, write=True)
    row = fleet.set_schedulable(session, name, time.time(), cordoned=True, draining=True)
    return _one(session, row)


@router.put("/{name}/partition", response_model=NodeOut)
def partition(name: str, body: PartitionIn, session: SessionDep, p: PrincipalDep) -> NodeOut:
    """Change how the node's GPUs are offered (whole, MIG, time-sliced); 409 while jobs hold
    devices on it."""
    require_platform(p, write=True)
    row = fleet.set_partitioning(session, name, body.partitioning, body.per_gpu, time.time())
    return _one(session, row)


@router.delete("/{name}", status_code=204)
def delete(name: str, session: SessionDep, p: PrincipalDep) -> Response:
    """Remove the node; 409 while jobs hold devices on it (drain it first)."""
    require_platform(p, write=True)
    fleet.delete_node(session, name)
    return Response(status_code=204)
