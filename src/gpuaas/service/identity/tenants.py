"""Tenants and the provider's terms for each.

Provider-admins create, change and delete tenants; platform viewers read them all and a tenant's
members read their own. A tenant's terms are the capacity the provider grants (per flavor and
resource), the borrowing and lending limits within a parent cohort, the largest job and a
priority ceiling. Each tenant has a root cohort named after it, derived from the terms again on
every change (:func:`gpuaas.service.governance.put_objects`), so the terms and the governance
the engine admits by never disagree. Capacity cannot drop below the nominal quota the tenant's
own ClusterQueues and Cohorts already hold, borrowing and lending need a parent cohort and may
only name granted flavors, and a tenant with unfinished jobs, or one a provider object still
refers to, is not deleted.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuaas.model.errors import InvalidValue
from gpuaas.model.job_state import UNFINISHED
from gpuaas.model.resources import MEMORY, canonical_amount, format_amount
from gpuaas.service.auth import Need, Principal, require_platform, tenant_for
from gpuaas.service.errors import conflict, invalid
from gpuaas.service.fleet import bump_version, take_turn_on, text_cursor
from gpuaas.service.governance import (
    COHORT,
    GOVERNANCE_VERSION,
    LOCAL_QUEUE,
    PRIORITY_CLASS,
    all_objects,
    build_governance,
    check_capacity,
    check_name,
    find_object,
    put_objects,
    tenant_queue_documents,
)
from gpuaas.service.identity.rows import commit_here, tenant_by_name
from gpuaas.service.models.common import Page, bytes_text, paginate
from gpuaas.service.models.identity import Capacity, TenantIn, TenantOut, TenantPatch
from gpuaas.service.models.quantities import check_amount
from gpuaas.service.models.quantities import check_name as check_resource
from gpuaas.store.tables import Job, Tenant, VolumeRow


def tenant_out(tenant: Tenant) -> TenantOut:
    return TenantOut(
        name=tenant.name,
        display_name=tenant.display_name,
        capacity=tenant.capacity or {},
        cohort=tenant.name,
        parent_cohort=tenant.parent_cohort,
        borrowing=tenant.borrowing or {},
        lending=tenant.lending or {},
        max_job=tenant.max_job or {},
        priority_ceiling=tenant.priority_ceiling,
        storage_quota=tenant.storage_quota,
        created_at=tenant.created_at,
    )


def parse_capacity(raw: Capacity, field: str = "capacity") -> dict[str, dict[str, str]]:
    """Capacity with every quantity checked and written canonically (``"64"``, ``"2Ti"``)."""
    out: dict[str, dict[str, str]] = {}
    for flavor, resources in raw.items():
        check_name(f"{field}.{flavor}", flavor)
        out[flavor] = parse_limits(resources, f"{field}.{flavor}")
    return out


def parse_limits(raw: Mapping[str, str | int], field: str) -> dict[str, str]:
    """``{resource: quantity}`` checked (as the document says each resource's amount:
    :mod:`gpuaas.service.models.quantities`) and written canonically."""
    out: dict[str, str] = {}
    for resource, value in raw.items():
        where = f"{field}.{resource}"
        try:
            check_resource(where, resource)
            check_amount(where, resource, value)
            amount = canonical_amount(resource, value, where)
        except InvalidValue as exc:
            raise invalid(where, exc.problem) from None
        out[resource] = format_amount(resource, amount)
    return out


def set_terms(session: Session, tenant: Tenant, body: TenantIn | TenantPatch) -> None:
    """Apply the provider's terms in ``body`` (those it sets) to ``tenant``, then derive its
    root cohort again; borrowing and lending need a parent cohort and name granted flavors."""
    given = body.model_fields_set
    if "capacity" in given and body.capacity is not None:
        capacity = parse_capacity(body.capacity)
        check_capacity(tenant, tenant_queue_documents(session, tenant), capacity, "capacity")
        tenant.capacity = capacity
    if "parent_cohort" in given:
        if body.parent_cohort is not None:
            check_name("parentCohort", body.parent_cohort)
        tenant.parent_cohort = body.parent_cohort
    for attr, field in (("borrowing", "borrowing"), ("lending", "lending")):
        value = getattr(body, attr)
        if attr in given and value is not None:
            setattr(tenant, attr, parse_capacity(value, field))
    if "max_job" in given and body.max_job is not None:
        tenant.max_job = parse_limits(body.max_job, "maxJob")
    if "priority_ceiling" in given:
        tenant.priority_ceiling = body.priority_ceiling
    if "storage_quota" in given:  # lowering it takes nothing held away (docs/storage.md)
        quota = body.storage_quota
        tenant.storage_quota = None if quota is None else _storage_quota(quota)
    for attr in ("borrowing", "lending"):
        terms = getattr(tenant, attr) or {}
        if terms and tenant.parent_cohort is None:
            raise invalid(
                attr, "needs a parentCohort (a tenant without one neither borrows nor lends)"
            )
        for flavor in terms:
            if flavor not in (tenant.capacity or {}):
                raise invalid(
                    f"{attr}.{flavor}",
                    f"flavor {flavor} is not in the tenant's capacity (grant it first, even 0)",
                )
    session.flush()
    put_objects(session, [], time.time(), by_provider=True, tenants=[tenant.id])


def _storage_quota(value: str | int) -> int:
    """Bytes, 0 allowed (nothing), as the document's size pattern says."""
    bytes_text("storageQuota", value, zero=True)
    return canonical_amount(MEMORY, value, "storageQuota")


def list_tenants(session: Session, p: Principal, limit: int, after: str | None) -> Page[TenantOut]:
    """Every tenant for platform roles; a tenant member sees its own tenants."""
    stmt = select(Tenant)
    if not p.sees_everything:
        stmt = stmt.where(Tenant.id.in_(list(p.tenant_roles)))
    rows, cursor = paginate(session, stmt, Tenant.name, limit, text_cursor(after))
    return Page(items=[tenant_out(t) for t in rows], next=cursor)


def create_tenant(session: Session, p: Principal, body: TenantIn) -> TenantOut:
    """A new tenant with the terms in ``body`` (provider-admins); its name must be free among
    tenants and Cohorts, since its root cohort takes it."""
    require_platform(p, write=True)
    if session.scalar(select(Tenant.id).where(Tenant.name == body.name)) is not None:
        raise conflict(f"tenant {body.name} already exists", "name")
    take_turn_on(session, GOVERNANCE_VERSION)
    if find_object(session, COHORT, body.name) is not None:
        raise conflict(
            f"a Cohort named {body.name} exists; a tenant's root cohort takes the tenant's name",
            "name",
        )
    tenant = Tenant(name=body.name, display_name=body.display_name, created_at=time.time())
    session.add(tenant)
    session.flush()
    set_terms(session, tenant, body)
    return tenant_out(tenant)


def get_tenant(session: Session, p: Principal, name: str) -> TenantOut:
    return tenant_out(tenant_for(session, p, name, Need.READ))


def update_tenant(session: Session, p: Principal, name: str, body: TenantPatch) -> TenantOut:
    """Change the display name or the provider's terms (provider-admins); only the terms take
    the governance turn and re-derive the root cohort."""
    require_platform(p, write=True)
    row = tenant_by_name(session, name)
    if body.display_name is not None:
        row.display_name = body.display_name
    if body.model_fields_set - {"display_name"}:
        take_turn_on(session, GOVERNANCE_VERSION)
        set_terms(session, row, body)
    session.flush()
    return tenant_out(row)


def delete_tenant(session: Session, p: Principal, name: str) -> None:
    """Delete the tenant with its queues, memberships and finished jobs (provider-admins); 409
    while it has unfinished jobs or the governance left without it would not hold together (a
    provider object still needs one of its queues)."""
    require_platform(p, write=True)
    take_turn_on(session, GOVERNANCE_VERSION)
    row = tenant_by_name(session, name)
    busy = session.scalar(
        select(func.count(Job.id)).where(Job.tenant_id == row.id, Job.state.in_(UNFINISHED))
    )
    if busy:
        raise conflict(f"tenant {name} has {busy} unfinished job(s); cancel them first")
    volumes = session.scalar(select(func.count(VolumeRow.id)).where(VolumeRow.tenant_id == row.id))
    if volumes:
        raise conflict(f"tenant {name} has {volumes} volume(s); delete them first")
    rows = all_objects(session)
    rest = [
        r.document
        for r in rows
        if r.tenant_id != row.id
        and not (r.kind == LOCAL_QUEUE and r.namespace == row.name)
        and not (r.kind == PRIORITY_CLASS and r.namespace)
    ]
    try:
        build_governance(rest, "governance")
    except InvalidValue as exc:
        raise conflict(f"tenant {name} is still referred to: {exc}") from None
    owned = any(r.tenant_id == row.id for r in rows)
    session.delete(row)
    if owned:
        bump_version(session, GOVERNANCE_VERSION)
    commit_here(session)
