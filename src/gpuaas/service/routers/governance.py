"""Who may use what, in Kueue's vocabulary: flavors, cohorts, cluster queues, local queues,
priority classes and hardware profiles, plus Kueue YAML import and export.

The provider owns flavors, cohorts and global objects; a tenant admin manages the tenant's own
ClusterQueues (within the capacity the provider gave), LocalQueues, priority classes and
hardware profiles. Every write is validated together with everything stored
(:mod:`gpuaas.service.governance`), so an invalid configuration is never stored.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import yaml
from fastapi import APIRouter, Query, Request, Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuaas.service import governance as gv
from gpuaas.service.auth import Need, require_platform, tenant_for
from gpuaas.service.deps import PrincipalDep, SessionDep
from gpuaas.service.errors import ApiError, conflict, forbidden, invalid, not_found
from gpuaas.service.fleet import text_cursor
from gpuaas.service.kueue_io import NamespaceMapping, export_yaml, import_documents
from gpuaas.service.models.common import Page, paginate
from gpuaas.service.models.governance import (
    ClusterQueueIn,
    ImportResult,
    LocalQueueIn,
    LocalQueueOut,
    ObjectIn,
    ObjectOut,
    PriorityClassIn,
    PriorityClassOut,
)
from gpuaas.store.tables import GovernanceObject, Job, Tenant

router = APIRouter(prefix="/v1", tags=["governance"])

LimitQ = Query(100, description="page size, 1-1000")
AfterQ = Query(None, description="the `next` cursor of the previous page")
YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml", "text/plain")


# --- shared helpers ------------------------------------------------------------------------


def _tenant_names(session: Session) -> dict[int, str]:
    return dict(session.execute(select(Tenant.id, Tenant.name)).all())


def _object_out(row: GovernanceObject, tenants: Mapping[int, str]) -> ObjectOut:
    return ObjectOut(
        kind=row.kind,
        name=row.name,
        tenant=None if row.tenant_id is None else tenants.get(row.tenant_id),
        spec=row.document.get("spec") or {},
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _name(body_name: str | None, path_name: str | None, *, label: bool = False) -> str:
    """The object's name: from the body on create, from the path on replace (they must agree)."""
    if path_name is not None and body_name is not None and body_name != path_name:
        raise invalid("name", f"{body_name!r} differs from the name in the path {path_name!r}")
    name = path_name if path_name is not None else body_name
    if name is None:
        raise invalid("name", "is required")
    return gv.check_name("name", name, label=label)


def _page(
    session: Session,
    stmt: Any,
    limit: int,
    after: str | None,
) -> tuple[list[GovernanceObject], str | None]:
    return paginate(session, stmt, GovernanceObject.name, limit, text_cursor(after))


def _of_kind(kind: str, namespace: str = "") -> Any:
    return select(GovernanceObject).where(
        GovernanceObject.kind == kind, GovernanceObject.namespace == namespace
    )


def _create(
    session: Session,
    kind: str,
    name: str,
    body: dict[str, Any],
    tenant_id: int | None,
    namespace: str = "",
    options: dict[str, Any] | None = None,
    *,
    by_provider: bool = False,
) -> GovernanceObject:
    """``by_provider``: a provider route (the provider's fields of a tenant's objects may
    change); tenant routes leave it False."""
    if gv.find_object(session, kind, name, namespace) is not None:
        raise conflict(f"{kind} {name} already exists", "name")
    doc = gv.document(kind, name, body, namespace)
    return gv.put_object(session, doc, tenant_id, time.time(), options, by_provider=by_provider)


def _replace(
    session: Session,
    row: GovernanceObject,
    body: dict[str, Any],
    tenant_id: int | None,
    options: dict[str, Any] | None = None,
    *,
    by_provider: bool = False,
) -> GovernanceObject:
    doc = gv.document(row.kind, row.name, body, row.namespace)
    return gv.put_object(session, doc, tenant_id, time.time(), options, by_provider=by_provider)


# --- provider objects: flavors, cohorts ----------------------------------------------------


def _provider_kind(path: str, kind: str) -> None:
    """GET list/one for any authenticated user; POST/PUT/DELETE for provider-admins."""

    @router.get(f"/{path}", response_model=Page[ObjectOut], name=f"list {kind}")
    def list_objects(
        session: SessionDep, p: PrincipalDep, limit: int = LimitQ, after: str | None = AfterQ
    ) -> Page[ObjectOut]:
        """Platform roles see every object; others the provider's own (tenants' cohorts are
        listed under their tenant)."""
        stmt = _of_kind(kind)
        if not p.sees_everything:
            stmt = stmt.where(GovernanceObject.tenant_id.is_(None))
        rows, cursor = _page(session, stmt, limit, after)
        tenants = _tenant_names(session)
        return Page(items=[_object_out(r, tenants) for r in rows], next=cursor)

    @router.get(f"/{path}/{{name}}", response_model=ObjectOut, name=f"get {kind}")
    def get_object(name: str, session: SessionDep, p: PrincipalDep) -> ObjectOut:
        row = gv.get_object(session, kind, name)
        if row.tenant_id is not None and not p.sees_everything:
            raise not_found(f"{kind} {name}")
        return _object_out(row, _tenant_names(session))

    @router.post(f"/{path}", response_model=ObjectOut, status_code=201, name=f"create {kind}")
    def create_object(body: ObjectIn, session: SessionDep, p: PrincipalDep) -> ObjectOut:
        require_platform(p, write=True)
        name = _name(body.name, None)
        row = _create(session, kind, name, {"spec": body.spec}, None, by_provider=True)
        return _object_out(row, {})

    @router.put(f"/{path}/{{name}}", response_model=ObjectOut, name=f"replace {kind}")
    def replace_object(
        name: str, body: ObjectIn, session: SessionDep, p: PrincipalDep
    ) -> ObjectOut:
        require_platform(p, write=True)
        _name(body.name, name)
        row = gv.get_object(session, kind, name)
        row = _replace(session, row, {"spec": body.spec}, row.tenant_id, by_provider=True)
        return _object_out(row, _tenant_names(session))

    @router.delete(f"/{path}/{{name}}", status_code=204, name=f"delete {kind}")
    def delete_object(name: str, session: SessionDep, p: PrincipalDep) -> Response:
        require_platform(p, write=True)
        gv.delete_object(session, gv.get_object(session, kind, name))
        return Response(status_code=204)


_provider_kind("flavors", gv.FLAVOR)
_provider_kind("cohorts", gv.COHORT)


# --- cluster queues ------------------------------------------------------------------------


def _owner_id(session: Session, tenant: str | None) -> int | None:
    if tenant is None:
        return None
    row = None
    if "\x00" not in tenant:
        row = session.scalar(select(Tenant).where(Tenant.name == tenant))
    if row is None:
        raise invalid("tenant", f"no tenant named {tenant!r}")
    return row.id


@router.get("/cluster-queues", response_model=Page[ObjectOut])
def list_cluster_queues(
    session: SessionDep,
    p: PrincipalDep,
    tenant: str | None = Query(None, description="only the queues this tenant owns"),
    limit: int = LimitQ,
    after: str | None = AfterQ,
) -> Page[ObjectOut]:
    require_platform(p, write=False)
    stmt = _of_kind(gv.CLUSTER_QUEUE)
    if tenant is not None:
        owner = None
        if "\x00" not in tenant:
            owner = session.scalar(select(Tenant.id).where(Tenant.name == tenant))
        stmt = stmt.where(GovernanceObject.tenant_id == (owner if owner is not None else -1))
    rows, cursor = _page(session, stmt, limit, after)
    tenants = _tenant_names(session)
    return Page(items=[_object_out(r, tenants) for r in rows], next=cursor)


@router.post("/cluster-queues", response_model=ObjectOut, status_code=201)
def create_cluster_queue(body: ClusterQueueIn, session: SessionDep, p: PrincipalDep) -> ObjectOut:
    require_platform(p, write=True)
    owner = _owner_id(session, body.tenant)
    name = _name(body.name, None)
    row = _create(session, gv.CLUSTER_QUEUE, name, {"spec": body.spec}, owner, by_provider=True)
    return _object_out(row, _tenant_names(session))


@router.get("/cluster-queues/{name}", response_model=ObjectOut)
def get_cluster_queue(name: str, session: SessionDep, p: PrincipalDep) -> ObjectOut:
    require_platform(p, write=False)
    return _object_out(gv.get_object(session, gv.CLUSTER_QUEUE, name), _tenant_names(session))


@router.put("/cluster-queues/{name}", response_model=ObjectOut)
def replace_cluster_queue(
    name: str, body: ClusterQueueIn, session: SessionDep, p: PrincipalDep
) -> ObjectOut:
    """Replace the spec; ``tenant`` sets the owner (leave it out to make it the provider's)."""
    require_platform(p, write=True)
    _name(body.name, name)
    row = gv.get_object(session, gv.CLUSTER_QUEUE, name)
    owner = _owner_id(session, body.tenant)
    row = _replace(session, row, {"spec": body.spec}, owner, by_provider=True)
    return _object_out(row, _tenant_names(session))


@router.delete("/cluster-queues/{name}", status_code=204)
def delete_cluster_queue(name: str, session: SessionDep, p: PrincipalDep) -> Response:
    require_platform(p, write=True)
    gv.delete_object(session, gv.get_object(session, gv.CLUSTER_QUEUE, name))
    return Response(status_code=204)


def _tenant_cq(session: Session, tenant: Tenant, name: str) -> GovernanceObject:
    row = gv.find_object(session, gv.CLUSTER_QUEUE, name)
    if row is None or row.tenant_id != tenant.id:
        raise not_found(f"ClusterQueue {name} of tenant {tenant.name}")
    return row


@router.get("/tenants/{tenant}/cluster-queues", response_model=Page[ObjectOut])
def list_tenant_cluster_queues(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = AfterQ,
) -> Page[ObjectOut]:
    """The ClusterQueues the tenant owns (its own, and the provider's assigned to it)."""
    row = tenant_for(session, p, tenant, Need.READ)
    stmt = _of_kind(gv.CLUSTER_QUEUE).where(GovernanceObject.tenant_id == row.id)
    rows, cursor = _page(session, stmt, limit, after)
    return Page(items=[_object_out(r, {row.id: row.name}) for r in rows], next=cursor)


@router.post("/tenants/{tenant}/cluster-queues", response_model=ObjectOut, status_code=201)
def create_tenant_cluster_queue(
    tenant: str, body: ObjectIn, session: SessionDep, p: PrincipalDep
) -> ObjectOut:
    """A ClusterQueue of the tenant; all its queues' nominal quota must fit its capacity."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    cq = _create(session, gv.CLUSTER_QUEUE, _name(body.name, None), {"spec": body.spec}, row.id)
    return _object_out(cq, {row.id: row.name})


@router.get("/tenants/{tenant}/cluster-queues/{name}", response_model=ObjectOut)
def get_tenant_cluster_queue(
    tenant: str, name: str, session: SessionDep, p: PrincipalDep
) -> ObjectOut:
    row = tenant_for(session, p, tenant, Need.READ)
    return _object_out(_tenant_cq(session, row, name), {row.id: row.name})


@router.put("/tenants/{tenant}/cluster-queues/{name}", response_model=ObjectOut)
def replace_tenant_cluster_queue(
    tenant: str, name: str, body: ObjectIn, session: SessionDep, p: PrincipalDep
) -> ObjectOut:
    row = tenant_for(session, p, tenant, Need.ADMIN)
    _name(body.name, name)
    cq = _replace(session, _tenant_cq(session, row, name), {"spec": body.spec}, row.id)
    return _object_out(cq, {row.id: row.name})


@router.delete("/tenants/{tenant}/cluster-queues/{name}", status_code=204)
def delete_tenant_cluster_queue(
    tenant: str, name: str, session: SessionDep, p: PrincipalDep
) -> Response:
    row = tenant_for(session, p, tenant, Need.ADMIN)
    gv.delete_object(session, _tenant_cq(session, row, name))
    return Response(status_code=204)


# --- a tenant's cohorts --------------------------------------------------------------------


def _tenant_cohort(session: Session, tenant: Tenant, name: str, write: bool) -> GovernanceObject:
    """The tenant's own Cohort ``name`` (its root cohort only to read: the provider's)."""
    row = gv.find_object(session, gv.COHORT, name)
    if row is None or row.tenant_id != tenant.id:
        raise not_found(f"Cohort {name} of tenant {tenant.name}")
    if write and name == tenant.name:
        raise forbidden(
            f"Cohort {name} is tenant {tenant.name}'s root cohort: the provider sets it (the "
            "tenant's capacity, borrowing, lending and parentCohort)"
        )
    return row


@router.get("/tenants/{tenant}/cohorts", response_model=Page[ObjectOut])
def list_tenant_cohorts(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = AfterQ,
) -> Page[ObjectOut]:
    """The tenant's root cohort (the provider's, named after the tenant) and its own cohorts."""
    row = tenant_for(session, p, tenant, Need.READ)
    stmt = _of_kind(gv.COHORT).where(GovernanceObject.tenant_id == row.id)
    rows, cursor = _page(session, stmt, limit, after)
    return Page(items=[_object_out(r, {row.id: row.name}) for r in rows], next=cursor)


@router.post("/tenants/{tenant}/cohorts", response_model=ObjectOut, status_code=201)
def create_tenant_cohort(
    tenant: str, body: ObjectIn, session: SessionDep, p: PrincipalDep
) -> ObjectOut:
    """A Cohort of the tenant inside its tree (``parentName``: the root cohort, the default,
    or another of its cohorts); its nominal quota counts against the tenant's grant."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    cohort = _create(session, gv.COHORT, _name(body.name, None), {"spec": body.spec}, row.id)
    return _object_out(cohort, {row.id: row.name})


@router.get("/tenants/{tenant}/cohorts/{name}", response_model=ObjectOut)
def get_tenant_cohort(tenant: str, name: str, session: SessionDep, p: PrincipalDep) -> ObjectOut:
    row = tenant_for(session, p, tenant, Need.READ)
    return _object_out(_tenant_cohort(session, row, name, False), {row.id: row.name})


@router.put("/tenants/{tenant}/cohorts/{name}", response_model=ObjectOut)
def replace_tenant_cohort(
    tenant: str, name: str, body: ObjectIn, session: SessionDep, p: PrincipalDep
) -> ObjectOut:
    row = tenant_for(session, p, tenant, Need.ADMIN)
    _name(body.name, name)
    cohort = _tenant_cohort(session, row, name, True)
    return _object_out(_replace(session, cohort, {"spec": body.spec}, row.id), {row.id: row.name})


@router.delete("/tenants/{tenant}/cohorts/{name}", status_code=204)
def delete_tenant_cohort(tenant: str, name: str, session: SessionDep, p: PrincipalDep) -> Response:
    """409 while a ClusterQueue or Cohort is still in it."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    gv.delete_object(session, _tenant_cohort(session, row, name, True))
    return Response(status_code=204)


# --- local queues --------------------------------------------------------------------------


def _lq_out(row: GovernanceObject, tenant: Tenant) -> LocalQueueOut:
    limit = (row.options or {}).get("userLimit")
    return LocalQueueOut(
        name=row.name,
        tenant=tenant.name,
        cluster_queue=str((row.document.get("spec") or {}).get("clusterQueue", "")),
        user_limit=None if limit is None else int(limit),
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _lq_counts(session: Session, tenant: Tenant, out: LocalQueueOut) -> LocalQueueOut:
    by_state = dict(
        session.execute(
            select(Job.state, func.count(Job.id))
            .where(Job.tenant_id == tenant.id, Job.local_queue == out.name)
            .group_by(Job.state)
        ).all()
    )
    out.pending = int(by_state.get("Pending", 0))
    out.admitted = int(by_state.get("Admitted", 0))
    out.running = int(by_state.get("Running", 0))
    return out


def _lq_body(
    session: Session, tenant: Tenant, body: LocalQueueIn
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The LocalQueue's document and options; its ClusterQueue must be one the tenant may use
    (its own or the provider's unassigned ones). Another tenant's queue is answered exactly
    like a missing one: a tenant learns nothing about others."""
    gv.check_name("clusterQueue", body.cluster_queue)
    usable = list(
        session.scalars(
            select(GovernanceObject.name)
            .where(
                GovernanceObject.kind == gv.CLUSTER_QUEUE,
                (GovernanceObject.tenant_id == tenant.id) | GovernanceObject.tenant_id.is_(None),
            )
            .order_by(GovernanceObject.name)
        )
    )
    if body.cluster_queue not in usable:
        shown = ", ".join(usable[:20]) + (" ..." if len(usable) > 20 else "") or "none"
        raise invalid(
            "clusterQueue",
            f"no ClusterQueue {body.cluster_queue!r} available to tenant {tenant.name} "
            f"(available: {shown})",
        )
    options = {} if body.user_limit is None else {"userLimit": body.user_limit}
    return {"spec": {"clusterQueue": body.cluster_queue}}, options


@router.get("/tenants/{tenant}/local-queues", response_model=Page[LocalQueueOut])
def list_local_queues(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = AfterQ,
) -> Page[LocalQueueOut]:
    row = tenant_for(session, p, tenant, Need.READ)
    rows, cursor = _page(session, _of_kind(gv.LOCAL_QUEUE, row.name), limit, after)
    return Page(items=[_lq_out(r, row) for r in rows], next=cursor)


@router.post("/tenants/{tenant}/local-queues", response_model=LocalQueueOut, status_code=201)
def create_local_queue(
    tenant: str, body: LocalQueueIn, session: SessionDep, p: PrincipalDep
) -> LocalQueueOut:
    """A LocalQueue in the tenant's namespace, pointing at one of its (or the provider's
    unassigned) ClusterQueues."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    doc, options = _lq_body(session, row, body)
    name = _name(body.name, None, label=True)
    lq = _create(session, gv.LOCAL_QUEUE, name, doc, row.id, row.name, options)
    return _lq_out(lq, row)


@router.get("/tenants/{tenant}/local-queues/{name}", response_model=LocalQueueOut)
def get_local_queue(tenant: str, name: str, session: SessionDep, p: PrincipalDep) -> LocalQueueOut:
    """The queue with how many of its jobs are pending, admitted and running."""
    row = tenant_for(session, p, tenant, Need.READ)
    lq = gv.get_object(session, gv.LOCAL_QUEUE, name, row.name)
    return _lq_counts(session, row, _lq_out(lq, row))


@router.put("/tenants/{tenant}/local-queues/{name}", response_model=LocalQueueOut)
def replace_local_queue(
    tenant: str, name: str, body: LocalQueueIn, session: SessionDep, p: PrincipalDep
) -> LocalQueueOut:
    row = tenant_for(session, p, tenant, Need.ADMIN)
    _name(body.name, name, label=True)
    lq = gv.get_object(session, gv.LOCAL_QUEUE, name, row.name)
    doc, options = _lq_body(session, row, body)
    return _lq_out(_replace(session, lq, doc, row.id, options), row)


@router.delete("/tenants/{tenant}/local-queues/{name}", status_code=204)
def delete_local_queue(tenant: str, name: str, session: SessionDep, p: PrincipalDep) -> Response:
    """409 while jobs wait or run in it, or a hardware profile sends jobs there."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    gv.delete_object(session, gv.get_object(session, gv.LOCAL_QUEUE, name, row.name))
    return Response(status_code=204)


# --- priority classes ----------------------------------------------------------------------


def _pc_out(row: GovernanceObject, tenant: str | None) -> PriorityClassOut:
    return PriorityClassOut(
        name=row.name,
        value=int(row.document.get("value", 0)),
        description=str(row.document.get("description") or ""),
        tenant=tenant,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _pc_body(body: PriorityClassIn) -> dict[str, Any]:
    out: dict[str, Any] = {"value": body.value}
    if body.description:
        out["description"] = body.description
    return out


@router.get("/priority-classes", response_model=Page[PriorityClassOut])
def list_priority_classes(
    session: SessionDep, p: PrincipalDep, limit: int = LimitQ, after: str | None = AfterQ
) -> Page[PriorityClassOut]:
    """The global priority classes (any authenticated user)."""
    rows, cursor = _page(session, _of_kind(gv.PRIORITY_CLASS), limit, after)
    return Page(items=[_pc_out(r, None) for r in rows], next=cursor)


@router.post("/priority-classes", response_model=PriorityClassOut, status_code=201)
def create_priority_class(
    body: PriorityClassIn, session: SessionDep, p: PrincipalDep
) -> PriorityClassOut:
    require_platform(p, write=True)
    name = _name(body.name, None)
    row = _create(session, gv.PRIORITY_CLASS, name, _pc_body(body), None, by_provider=True)
    return _pc_out(row, None)


@router.get("/priority-classes/{name}", response_model=PriorityClassOut)
def get_priority_class(name: str, session: SessionDep, p: PrincipalDep) -> PriorityClassOut:
    return _pc_out(gv.get_object(session, gv.PRIORITY_CLASS, name), None)


@router.put("/priority-classes/{name}", response_model=PriorityClassOut)
def replace_priority_class(
    name: str, body: PriorityClassIn, session: SessionDep, p: PrincipalDep
) -> PriorityClassOut:
    require_platform(p, write=True)
    _name(body.name, name)
    row = gv.get_object(session, gv.PRIORITY_CLASS, name)
    return _pc_out(_replace(session, row, _pc_body(body), None, by_provider=True), None)


@router.delete("/priority-classes/{name}", status_code=204)
def delete_priority_class(name: str, session: SessionDep, p: PrincipalDep) -> Response:
    require_platform(p, write=True)
    gv.delete_object(session, gv.get_object(session, gv.PRIORITY_CLASS, name))
    return Response(status_code=204)


@router.get("/tenants/{tenant}/priority-classes", response_model=Page[PriorityClassOut])
def list_tenant_priority_classes(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = AfterQ,
) -> Page[PriorityClassOut]:
    """The tenant's own classes and the global ones (a tenant's class hides a global one of
    the same name), by name."""
    row = tenant_for(session, p, tenant, Need.READ)
    stmt = select(GovernanceObject).where(
        GovernanceObject.kind == gv.PRIORITY_CLASS,
        GovernanceObject.namespace.in_(["", row.name]),
    )
    if after is not None:
        stmt = stmt.where(GovernanceObject.name > text_cursor(after))
    if limit < 1 or limit > 1000:
        raise invalid("limit", f"must be between 1 and 1000, got {limit}")
    chosen: dict[str, GovernanceObject] = {}
    for obj in session.scalars(stmt.order_by(GovernanceObject.name)):
        if obj.name not in chosen or obj.namespace:
            chosen[obj.name] = obj
    names = sorted(chosen)
    page = names[:limit]
    items = [_pc_out(chosen[n], row.name if chosen[n].namespace else None) for n in page]
    return Page(items=items, next=page[-1] if len(names) > limit else None)


def _tenant_pc(session: Session, tenant: Tenant, name: str) -> GovernanceObject:
    return gv.get_object(session, gv.PRIORITY_CLASS, name, tenant.name)


@router.post("/tenants/{tenant}/priority-classes", response_model=PriorityClassOut, status_code=201)
def create_tenant_priority_class(
    tenant: str, body: PriorityClassIn, session: SessionDep, p: PrincipalDep
) -> PriorityClassOut:
    row = tenant_for(session, p, tenant, Need.ADMIN)
    name = _name(body.name, None)
    if gv.find_object(session, gv.PRIORITY_CLASS, name, row.name) is not None:
        raise conflict(f"WorkloadPriorityClass {name} already exists in {row.name}", "name")
    pc = gv.put_object(
        session, gv.document(gv.PRIORITY_CLASS, name, _pc_body(body)), row.id, time.time()
    )
    return _pc_out(pc, row.name)


@router.get("/tenants/{tenant}/priority-classes/{name}", response_model=PriorityClassOut)
def get_tenant_priority_class(
    tenant: str, name: str, session: SessionDep, p: PrincipalDep
) -> PriorityClassOut:
    """The tenant's class ``name``, else the global one."""
    row = tenant_for(session, p, tenant, Need.READ)
    own = gv.find_object(session, gv.PRIORITY_CLASS, name, row.name)
    if own is not None:
        return _pc_out(own, row.name)
    return _pc_out(gv.get_object(session, gv.PRIORITY_CLASS, name), None)


@router.put("/tenants/{tenant}/priority-classes/{name}", response_model=PriorityClassOut)
def replace_tenant_priority_class(
    tenant: str, name: str, body: PriorityClassIn, session: SessionDep, p: PrincipalDep
) -> PriorityClassOut:
    row = tenant_for(session, p, tenant, Need.ADMIN)
    _name(body.name, name)
    _tenant_pc(session, row, name)
    pc = gv.put_object(
        session, gv.document(gv.PRIORITY_CLASS, name, _pc_body(body)), row.id, time.time()
    )
    return _pc_out(pc, row.name)


@router.delete("/tenants/{tenant}/priority-classes/{name}", status_code=204)
def delete_tenant_priority_class(
    tenant: str, name: str, session: SessionDep, p: PrincipalDep
) -> Response:
    row = tenant_for(session, p, tenant, Need.ADMIN)
    gv.delete_object(session, _tenant_pc(session, row, name))
    return Response(status_code=204)


# --- hardware profiles ---------------------------------------------------------------------


@router.get("/hardware-profiles", response_model=Page[ObjectOut])
def list_hardware_profiles(
    session: SessionDep, p: PrincipalDep, limit: int = LimitQ, after: str | None = AfterQ
) -> Page[ObjectOut]:
    require_platform(p, write=False)
    rows, cursor = _page(session, _of_kind(gv.HARDWARE_PROFILE), limit, after)
    tenants = _tenant_names(session)
    return Page(items=[_object_out(r, tenants) for r in rows], next=cursor)


@router.post("/hardware-profiles", response_model=ObjectOut, status_code=201)
def create_hardware_profile(body: ObjectIn, session: SessionDep, p: PrincipalDep) -> ObjectOut:
    require_platform(p, write=True)
    name = _name(body.name, None)
    row = _create(session, gv.HARDWARE_PROFILE, name, {"spec": body.spec}, None, by_provider=True)
    return _object_out(row, {})


@router.get("/hardware-profiles/{name}", response_model=ObjectOut)
def get_hardware_profile(name: str, session: SessionDep, p: PrincipalDep) -> ObjectOut:
    require_platform(p, write=False)
    return _object_out(gv.get_object(session, gv.HARDWARE_PROFILE, name), _tenant_names(session))


@router.put("/hardware-profiles/{name}", response_model=ObjectOut)
def replace_hardware_profile(
    name: str, body: ObjectIn, session: SessionDep, p: PrincipalDep
) -> ObjectOut:
    require_platform(p, write=True)
    _name(body.name, name)
    row = gv.get_object(session, gv.HARDWARE_PROFILE, name)
    if row.tenant_id is not None:
        body.spec = _owned_profile_spec(session, body.spec, _tenant_names(session)[row.tenant_id])
    row = _replace(session, row, {"spec": body.spec}, row.tenant_id, by_provider=True)
    return _object_out(row, _tenant_names(session))


@router.delete("/hardware-profiles/{name}", status_code=204)
def delete_hardware_profile(name: str, session: SessionDep, p: PrincipalDep) -> Response:
    require_platform(p, write=True)
    gv.delete_object(session, gv.get_object(session, gv.HARDWARE_PROFILE, name))
    return Response(status_code=204)


def _tenant_view(out: ObjectOut, tenant: Tenant) -> ObjectOut:
    """A profile as a tenant sees it: the list of other tenants it serves is not theirs."""
    if "allowedTenants" in out.spec:
        out.spec = {**out.spec, "allowedTenants": [tenant.name]}
    return out


def _owned_profile_spec(session: Session, spec: dict[str, Any], tenant: str) -> dict[str, Any]:
    """A tenant's own profile serves that tenant only, through one of its LocalQueues (named
    here among the tenant's own queues, never another tenant's)."""
    allowed = spec.get("allowedTenants")
    if allowed not in (None, [tenant]):
        raise invalid("spec.allowedTenants", f"a tenant's own profile serves only {tenant}")
    queue = spec.get("localQueue")
    if isinstance(queue, str) and gv.find_object(session, gv.LOCAL_QUEUE, queue, tenant) is None:
        own = sorted(
            session.scalars(
                _of_kind(gv.LOCAL_QUEUE, tenant).with_only_columns(GovernanceObject.name)
            )
        )
        raise invalid(
            "spec.localQueue",
            f"tenant {tenant} has no LocalQueue {queue!r} (its queues: {', '.join(own) or 'none'})",
        )
    return {**spec, "allowedTenants": [tenant]}


@router.get("/tenants/{tenant}/hardware-profiles", response_model=Page[ObjectOut])
def list_tenant_hardware_profiles(
    tenant: str,
    session: SessionDep,
    p: PrincipalDep,
    limit: int = LimitQ,
    after: str | None = AfterQ,
) -> Page[ObjectOut]:
    """The profiles the tenant may use: allowed for it, with its LocalQueue in place."""
    row = tenant_for(session, p, tenant, Need.READ)
    if limit < 1 or limit > 1000:
        raise invalid("limit", f"must be between 1 and 1000, got {limit}")
    names = sorted(
        hp.name for hp in gv.usable_profiles(session, row) if after is None or hp.name > after
    )
    page = names[:limit]
    rows = {
        r.name: r
        for r in session.scalars(
            _of_kind(gv.HARDWARE_PROFILE).where(GovernanceObject.name.in_(page))
        )
    }
    tenants = _tenant_names(session)
    items = [_tenant_view(_object_out(rows[n], tenants), row) for n in page]
    return Page(items=items, next=page[-1] if len(names) > limit else None)


@router.post("/tenants/{tenant}/hardware-profiles", response_model=ObjectOut, status_code=201)
def create_tenant_hardware_profile(
    tenant: str, body: ObjectIn, session: SessionDep, p: PrincipalDep
) -> ObjectOut:
    """A profile owned by the tenant, usable by it only."""
    row = tenant_for(session, p, tenant, Need.ADMIN)
    spec = _owned_profile_spec(session, body.spec, row.name)
    hp = _create(session, gv.HARDWARE_PROFILE, _name(body.name, None), {"spec": spec}, row.id)
    return _object_out(hp, {row.id: row.name})


def _usable_or_own(session: Session, tenant: Tenant, name: str) -> GovernanceObject:
    row = gv.find_object(session, gv.HARDWARE_PROFILE, name)
    if row is None or (
        row.tenant_id != tenant.id
        and name not in {hp.name for hp in gv.usable_profiles(session, tenant)}
    ):
        raise not_found(f"HardwareProfile {name} for tenant {tenant.name}")
    return row


@router.get("/tenants/{tenant}/hardware-profiles/{name}", response_model=ObjectOut)
def get_tenant_hardware_profile(
    tenant: str, name: str, session: SessionDep, p: PrincipalDep
) -> ObjectOut:
    row = tenant_for(session, p, tenant, Need.READ)
    hp = _usable_or_own(session, row, name)
    return _tenant_view(_object_out(hp, _tenant_names(session)), row)


def _own_profile(session: Session, tenant: Tenant, name: str) -> GovernanceObject:
    row = gv.find_object(session, gv.HARDWARE_PROFILE, name)
    if row is None or row.tenant_id != tenant.id:
        raise not_found(f"HardwareProfile {name} of tenant {tenant.name}")
    return row


@router.put("/tenants/{tenant}/hardware-profiles/{name}", response_model=ObjectOut)
def replace_tenant_hardware_profile(
    tenant: str, name: str, body: ObjectIn, session: SessionDep, p: PrincipalDep
) -> ObjectOut:
    row = tenant_for(session, p, tenant, Need.ADMIN)
    _name(body.name, name)
    spec = _owned_profile_spec(session, body.spec, row.name)
    hp = _replace(session, _own_profile(session, row, name), {"spec": spec}, row.id)
    return _object_out(hp, {row.id: row.name})


@router.delete("/tenants/{tenant}/hardware-profiles/{name}", status_code=204)
def delete_tenant_hardware_profile(
    tenant: str, name: str, session: SessionDep, p: PrincipalDep
) -> Response:
    row = tenant_for(session, p, tenant, Need.ADMIN)
    gv.delete_object(session, _own_profile(session, row, name))
    return Response(status_code=204)


# --- Kueue import / export -----------------------------------------------------------------


def _parse_import(raw: bytes, content_type: str) -> list[Any]:
    """The objects of a multi-document YAML text or a JSON list (or ``kind: List``)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise invalid("body", "must be UTF-8 text") from None
    media = content_type.split(";")[0].strip().lower()
    try:
        if media == "application/json":
            parsed = json.loads(text)
            docs = parsed if isinstance(parsed, list) else [parsed]
        elif media in YAML_TYPES or not media:
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        else:
            raise ApiError(415, f"unsupported media type {media!r} (use application/yaml)")
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        what = "JSON" if media.endswith("json") else "YAML"
        raise invalid("body", f"not valid {what}: {exc}") from None
    if len(docs) == 1 and isinstance(docs[0], Mapping) and docs[0].get("kind") == "List":
        docs = docs[0].get("items") or []
    if not docs:
        raise invalid("body", "no objects to import")
    for index, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            raise invalid(f"body[{index}]", f"expected an object, got {type(doc).__name__}")
    return docs


_IMPORT_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/yaml": {"schema": {"type": "string"}},
            "application/json": {"schema": {"type": "array", "items": {"type": "object"}}},
        },
    }
}


@router.post("/kueue/import", response_model=ImportResult, openapi_extra=_IMPORT_BODY)
async def import_kueue(
    request: Request,
    session: SessionDep,
    p: PrincipalDep,
    dry_run: bool = Query(False, alias="dryRun", description="validate only, store nothing"),
    namespace_map: list[str] = Query(
        [],
        alias="namespaceMap",
        description="LocalQueue namespace -> tenant, as namespace=tenant (repeat, or separate "
        "with commas); by default a namespace is the tenant of the same name",
    ),
    tenant: str | None = Query(
        None, description="the tenant of every LocalQueue namespace namespaceMap does not name"
    ),
) -> ImportResult:
    """Create or replace Kueue objects (``kueue.x-k8s.io/v1beta2``; ``v1beta1`` and
    ``v1alpha1`` converted as Kueue converts them; gpuaas HardwareProfiles) from a
    multi-document YAML, validated together with what is stored: all of them are stored, or
    none. Objects that mean what is stored already are reported unchanged and left alone."""
    require_platform(p, write=True)
    mapping = NamespaceMapping.parse(namespace_map, tenant)
    docs = _parse_import(await request.body(), request.headers.get("content-type", ""))
    done = import_documents(session, docs, mapping, dry_run)
    return ImportResult(
        dry_run=dry_run, created=done.created, updated=done.updated, unchanged=done.unchanged
    )


@router.get("/kueue/export", response_class=Response)
def export_kueue(session: SessionDep, p: PrincipalDep) -> Response:
    """Every shared object as Kueue v1beta2 YAML (HardwareProfiles as gpuaas.io/v1), as it was
    written (quantities keep their form), ready for ``kubectl apply`` or for import elsewhere;
    tenants' own priority classes are left out."""
    require_platform(p, write=False)
    return Response(export_yaml(session), media_type="application/yaml")
