"""Governance objects as the service stores them: Kueue-shaped documents, validated together.

Every write builds the whole :class:`~gpuaas.model.governance.Governance` from the stored
documents plus the change with the Kueue loader and validates it before anything is stored, so
the database never holds a configuration the engine would reject. Every change bumps
``governance.version`` in Meta: the reconciler reloads when it moves.

Ownership (``GovernanceObject.tenant_id``): NULL for the provider's objects; a tenant's own
ClusterQueues, LocalQueues (namespace = tenant name), priority classes and hardware profiles
carry the tenant. A tenant's priority classes are namespaced to it (``namespace`` = tenant name)
and kept out of the shared Governance, where priority classes are cluster-wide by name.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.engine.admission.state import AdmissionConfig
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import Governance, HardwareProfile
from gpuaas.model.job_state import ACTIVE, UNFINISHED
from gpuaas.service import tenancy
from gpuaas.service.errors import conflict, invalid, not_found
from gpuaas.service.fleet import bump_version, take_turn_on
from gpuaas.service.tenancy import check_capacity as check_capacity
from gpuaas.service.tenancy import nominal_totals as nominal_totals
from gpuaas.store.tables import GovernanceObject, Job, Tenant
from gpuaas.supply.kueue import (
    API_VERSION,
    GPUAAS_API_VERSION,
    GPUAAS_KINDS,
    KINDS,
    load_objects,
)
from gpuaas.supply.loaders._common import label_key_problem, label_value_problem

GOVERNANCE_VERSION = "governance.version"
FLAVOR = "ResourceFlavor"
COHORT = "Cohort"
CLUSTER_QUEUE = "ClusterQueue"
LOCAL_QUEUE = "LocalQueue"
PRIORITY_CLASS = "WorkloadPriorityClass"
HARDWARE_PROFILE = "HardwareProfile"

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def name_problem(name: object, *, label: bool = False) -> str | None:
    """Why ``name`` is not a DNS-1123 subdomain (``label``: a DNS-1123 label), or None."""
    limit = 63 if label else 253
    what = "DNS-1123 label" if label else "DNS-1123 subdomain"
    if not isinstance(name, str) or not name:
        return f"must be a non-empty string, got {name!r}"
    pattern = _DNS_LABEL if label else _DNS_SUBDOMAIN
    if len(name) > limit or not pattern.fullmatch(name):
        return (
            f"{name!r} is not a valid {what} (at most {limit} lowercase letters, digits, '-'"
            + ("" if label else " and '.'")
            + ", starting and ending with a letter or digit)"
        )
    return None


def check_name(field: str, name: object, *, label: bool = False) -> str:
    """``name`` if it is a DNS-1123 subdomain (``label``: a DNS-1123 label, at most 63);
    otherwise a 422 naming ``field``."""
    problem = name_problem(name, label=label)
    if problem:
        raise invalid(field, problem)
    assert isinstance(name, str)
    return name


def document(kind: str, name: str, body: Mapping[str, Any], namespace: str = "") -> dict[str, Any]:
    """A Kueue-shaped object: ``body`` holds ``spec`` (or ``value``/``description``)."""
    api = GPUAAS_API_VERSION if kind in GPUAAS_KINDS else API_VERSION
    meta: dict[str, Any] = {"name": name}
    if namespace and kind == LOCAL_QUEUE:
        meta["namespace"] = namespace
    return {"apiVersion": api, "kind": kind, "metadata": meta, **body}


def _canonical(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A document without runtime output (``status``, server metadata), for storage."""
    meta = raw.get("metadata")
    if not isinstance(meta, Mapping):
        raise invalid("metadata", "expected a mapping with a name")
    kind = raw.get("kind")
    out: dict[str, Any] = {"apiVersion": raw.get("apiVersion"), "kind": kind}
    kept = {"name": meta.get("name")}
    if "namespace" in meta:
        kept["namespace"] = meta["namespace"]
    unknown = set(meta) - {"name", "namespace", "uid", "resourceVersion", "generation"}
    unknown -= {"creationTimestamp", "managedFields", "selfLink"}
    if unknown:
        kept.update({k: meta[k] for k in unknown})  # the loader rejects them by name
    out["metadata"] = kept
    out.update({k: v for k, v in raw.items() if k not in ("apiVersion", "kind", "metadata")})
    out.pop("status", None)
    return out


def all_objects(session: Session) -> list[GovernanceObject]:
    return list(session.scalars(select(GovernanceObject).order_by(GovernanceObject.id)))


def _shared(row: GovernanceObject) -> bool:
    """Whether ``row`` belongs in the shared Governance (tenants' priority classes do not)."""
    return not (row.kind == PRIORITY_CLASS and row.namespace)


def build_governance(documents: Iterable[Mapping[str, Any]], source: str) -> Governance:
    """The validated Governance of ``documents``; InvalidValue names the object and field."""
    return load_objects(list(documents), source)


def load_governance(session: Session) -> tuple[Governance, AdmissionConfig]:
    """Every stored object as the engine's Governance, and per-queue user limits."""
    rows = all_objects(session)
    gov = build_governance((r.document for r in rows if _shared(r)), "governance")
    limits = {
        f"{r.namespace}/{r.name}": int(r.options["userLimit"])
        for r in rows
        if r.kind == LOCAL_QUEUE and (r.options or {}).get("userLimit") is not None
    }
    return gov, AdmissionConfig(user_limits=limits)


def find_object(
    session: Session, kind: str, name: str, namespace: str = ""
) -> GovernanceObject | None:
    if "\x00" in name or "\x00" in namespace:
        return None  # no stored name has one, and PostgreSQL refuses it in a query
    return session.scalar(
        select(GovernanceObject).where(
            GovernanceObject.kind == kind,
            GovernanceObject.namespace == namespace,
            GovernanceObject.name == name,
        )
    )


def get_object(session: Session, kind: str, name: str, namespace: str = "") -> GovernanceObject:
    row = find_object(session, kind, name, namespace)
    if row is None:
        raise not_found(f"{kind} {namespace + '/' if namespace else ''}{name}")
    return row


def check_key(raw: Mapping[str, Any]) -> tuple[str, str, str]:
    """``(kind, namespace, name)`` of a document, or a 422 naming the field (an unknown kind, a
    name that is not DNS-1123: nothing else is looked up with them)."""
    return _key(raw)


def _key(raw: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = raw.get("metadata") or {}
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in (*KINDS, *GPUAAS_KINDS):
        known = ", ".join((*KINDS, *GPUAAS_KINDS))
        raise invalid("kind", f"{kind!r} is not supported (supported: {known})")
    name = check_name("metadata.name", meta.get("name"))
    namespace = ""
    if kind == LOCAL_QUEUE:
        namespace = check_name("metadata.namespace", meta.get("namespace"), label=True)
    return kind, namespace, name


def _check_flavor(doc: Mapping[str, Any]) -> None:
    """Node labels and taints of a ResourceFlavor must be valid Kubernetes labels: they are
    matched against nodes, whose labels are checked the same way."""
    spec = doc.get("spec")
    if not isinstance(spec, Mapping):
        return  # the Kueue loader reports the shape
    labels = spec.get("nodeLabels")
    for key, value in labels.items() if isinstance(labels, Mapping) else ():
        field = f"spec.nodeLabels.{key}"
        problem = label_key_problem(str(key)) or label_value_problem(str(value))
        if problem:
            raise invalid(field, problem)
    taints = spec.get("nodeTaints")
    for index, taint in enumerate(taints if isinstance(taints, list) else ()):
        if not isinstance(taint, Mapping):
            continue
        field = f"spec.nodeTaints[{index}]"
        problem = label_key_problem(str(taint.get("key", ""))) or label_value_problem(
            str(taint.get("value") or "")
        )
        if problem:
            raise invalid(field, problem)


def put_object(
    session: Session,
    document: dict[str, Any],
    tenant_id: int | None,
    now: float,
    options: dict[str, Any] | None = None,
    *,
    by_provider: bool = False,
) -> GovernanceObject:
    """Create or replace one object after validating the whole resulting configuration.

    A LocalQueue's namespace must be a tenant (which then owns it) and its ClusterQueue must be
    the tenant's or the provider's; a tenant's priority class is namespaced to it; a tenant's
    ClusterQueues and Cohorts stay inside its tree and grant (:mod:`gpuaas.service.tenancy`).
    ``by_provider``: the write is made with the provider's authority (provider routes only).
    """
    try:
        return put_objects(session, [(document, tenant_id, options)], now, by_provider=by_provider)[
            0
        ]
    except InvalidValue as exc:
        # a single object's own field is named as the request body names it ("spec.x")
        metadata = document.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        prefix = f"governance: {document.get('kind')} {name}: "
        if exc.field.startswith(prefix):
            raise InvalidValue(exc.field.removeprefix(prefix), exc.problem) from None
        raise


def put_objects(
    session: Session,
    changes: list[tuple[dict[str, Any], int | None, dict[str, Any] | None]],
    now: float,
    source: str = "governance",
    write: bool = True,
    *,
    by_provider: bool = False,
    tenants: Iterable[int] = (),
) -> list[GovernanceObject]:
    """:func:`put_object` for several objects at once, validated together (an import);
    ``write=False`` validates only (a dry run) and returns nothing.

    ``tenants``: tenants whose terms changed (their root cohorts are derived again). Unless
    ``by_provider``, the write has a tenant's authority and may not change the provider's
    fields of a tenant's objects (:mod:`gpuaas.service.tenancy`). The returned rows are the
    changed objects in order (derived root cohorts follow them).
    """
    take_turn_on(session, GOVERNANCE_VERSION)
    rows = all_objects(session)
    by_key = {(r.kind, r.namespace, r.name): r for r in rows}
    tenant_rows = tenancy.all_tenants(session)
    staged: dict[tuple[str, str, str], tuple[dict[str, Any], int | None, dict[str, Any]]] = {}
    for raw, tenant_id, options in changes:
        doc = _canonical(raw)
        kind, namespace, name = _key(doc)
        if kind == FLAVOR:
            _check_flavor(doc)
        tenant = tenant_rows.get(tenant_id) if tenant_id is not None else None
        if tenant_id is not None and tenant is None:
            raise invalid("tenant", f"no tenant with id {tenant_id}")
        if kind == LOCAL_QUEUE:
            owner = session.scalar(select(Tenant).where(Tenant.name == namespace))
            if owner is None:
                raise invalid("metadata.namespace", f"no tenant named {namespace!r}")
            if tenant is not None and tenant.id != owner.id:
                raise invalid("metadata.namespace", f"must be the tenant's name {tenant.name!r}")
            tenant_id = owner.id
        elif kind == PRIORITY_CLASS and tenant is not None:
            namespace = tenant.name
        key = (kind, namespace, name)
        if key in staged:
            raise invalid(f"{source}: {kind} {name}", "defined twice")
        previous = by_key.get(key)
        kept = dict(previous.options or {}) if previous is not None and options is None else {}
        staged[key] = (doc, tenant_id, options if options is not None else kept)
    requested = len(staged)
    affected, carried = tenancy.stage_roots(session, tenant_rows, staged, by_key, tenants)
    owners = {k: r.tenant_id for k, r in by_key.items()}
    owners.update({k: v[1] for k, v in staged.items()})
    documents = {k: r.document for k, r in by_key.items()}
    documents.update({k: v[0] for k, v in staged.items()})
    for key, (doc, owner, _) in staged.items():
        if key[0] == PRIORITY_CLASS and key[1]:
            build_governance([doc], source)  # validated alone: not part of the shared config
            if owner is not None and owner in tenant_rows:
                field = "value" if requested == 1 else f"{source}: {key[0]} {key[2]}: value"
                value = int(doc.get("value", 0))
                tenancy.check_priority_ceiling(tenant_rows[owner], value, documents, field)
    shared = [d for k, d in documents.items() if not (k[0] == PRIORITY_CLASS and k[1])]
    gov = build_governance(shared, source)
    _check_local_queue_owners(session, gov, owners)
    stored: list[Governance] = []

    def previous_governance() -> Governance:
        if not stored:
            stored.append(build_governance((r.document for r in rows if _shared(r)), source))
        return stored[0]

    tenancy.check_boundary(
        gov,
        tenant_rows,
        staged,
        owners,
        documents,
        affected,
        carried,
        previous_governance,
        by_provider,
        source,
    )
    if not write:
        return []
    out = []
    for key, (doc, tenant_id, options) in staged.items():
        row = by_key.get(key)
        if row is None:
            kind, namespace, name = key
            row = GovernanceObject(
                kind=kind, namespace=namespace, name=name, created_at=now, document={}
            )
            session.add(row)
        row.document = doc
        row.tenant_id = tenant_id
        row.options = options
        row.updated_at = now
        out.append(row)
    bump_version(session, GOVERNANCE_VERSION)
    session.flush()
    return out


def _check_local_queue_owners(
    session: Session, gov: Governance, owners: Mapping[tuple[str, str, str], int | None]
) -> None:
    """A LocalQueue may point only at its tenant's or the provider's ClusterQueues."""
    for lq in gov.local_queues.values():
        cq_owner = owners.get((CLUSTER_QUEUE, "", lq.cluster_queue))
        lq_owner = owners.get((LOCAL_QUEUE, lq.namespace, lq.name))
        if cq_owner is not None and cq_owner != lq_owner:
            other = session.get(Tenant, cq_owner)
            raise invalid(
                f"LocalQueue {lq.key}: spec.clusterQueue",
                f"ClusterQueue {lq.cluster_queue} belongs to tenant "
                f"{other.name if other else cq_owner}, not to {lq.namespace}",
            )


def tenant_queue_documents(session: Session, tenant: Tenant) -> list[Mapping[str, Any]]:
    """The documents of the tenant's own ClusterQueues and Cohorts (its root cohort left out):
    what holds quota of its grant."""
    return [
        row.document
        for row in session.scalars(
            select(GovernanceObject).where(
                GovernanceObject.kind.in_((CLUSTER_QUEUE, COHORT)),
                GovernanceObject.tenant_id == tenant.id,
                GovernanceObject.name != tenant.name,
            )
        )
    ]


def delete_object(session: Session, row: GovernanceObject) -> None:
    """Delete ``row``; 409 naming what still refers to it (validated like any change)."""
    take_turn_on(session, GOVERNANCE_VERSION)
    if row.kind == LOCAL_QUEUE:
        waiting = session.scalar(
            select(Job.id)
            .where(
                Job.tenant_id == row.tenant_id,
                Job.local_queue == row.name,
                Job.state.in_(UNFINISHED),
            )
            .limit(1)
        )
        if waiting is not None:
            raise conflict(
                f"LocalQueue {row.namespace}/{row.name} still has unfinished jobs (e.g. job "
                f"{waiting}); cancel them or wait for them to finish"
            )
    if row.kind == CLUSTER_QUEUE:
        holding = session.scalar(
            select(Job.id).where(Job.cluster_queue == row.name, Job.state.in_(ACTIVE)).limit(1)
        )
        if holding is not None:
            raise conflict(
                f"ClusterQueue {row.name} still holds quota for admitted jobs (e.g. job "
                f"{holding}); wait for them to finish"
            )
    tenancy.check_root_write(row, tenancy.all_tenants(session).values())
    rest = [r for r in all_objects(session) if r.id != row.id and _shared(r)]
    users = _referrers(row, rest)
    if users:
        raise conflict(f"{row.kind} {row.name} is still used by {', '.join(users)}")
    if _shared(row):
        try:
            build_governance((r.document for r in rest), "governance")
        except InvalidValue as exc:
            raise conflict(f"{row.kind} {row.name} is still needed: {exc}") from None
    owner = row.tenant_id if row.kind in (CLUSTER_QUEUE, COHORT) else None
    session.delete(row)
    bump_version(session, GOVERNANCE_VERSION)
    session.flush()
    if owner is not None:  # the quota it held goes back to the tenant's root cohort
        put_objects(session, [], time.time(), by_provider=True, tenants=[owner])


def _referrers(row: GovernanceObject, rest: Iterable[GovernanceObject]) -> list[str]:
    """Objects in ``rest`` that name ``row``: a flavor in quotas, a CQ in local queues, a local
    queue in hardware profiles."""
    found = []
    for other in rest:
        spec = other.document.get("spec") or {}
        if row.kind == FLAVOR and other.kind in (CLUSTER_QUEUE, COHORT):
            names = {
                f.get("name")
                for g in spec.get("resourceGroups") or []
                for f in g.get("flavors") or []
            }
            if row.name in names:
                found.append(f"{other.kind} {other.name}")
        elif row.kind == COHORT and other.kind in (CLUSTER_QUEUE, COHORT):
            # as in Kueue, a provider's cohort still named stays as an implicit one; a tenant's
            # may not: its name could then be taken by another tree's Cohort, moving its
            # objects out of the tenant's tree
            if (row.tenant_id is not None or other.tenant_id is not None) and spec.get(
                "cohortName" if other.kind == CLUSTER_QUEUE else "parentName"
            ) == row.name:
                found.append(f"{other.kind} {other.name}")
        elif row.kind == CLUSTER_QUEUE and other.kind == LOCAL_QUEUE:
            if spec.get("clusterQueue") == row.name:
                found.append(f"LocalQueue {other.namespace}/{other.name}")
        elif row.kind == LOCAL_QUEUE and other.kind == HARDWARE_PROFILE:
            allowed = spec.get("allowedTenants") or []
            if spec.get("localQueue") == row.name and (not allowed or row.namespace in allowed):
                found.append(f"HardwareProfile {other.name}")
    return found


def priority_value(session: Session, tenant_id: int, name: str) -> int:
    """The value of priority class ``name``: the tenant's own first, then the global one."""
    tenant = session.get(Tenant, tenant_id)
    for namespace in ([tenant.name] if tenant is not None else []) + [""]:
        row = find_object(session, PRIORITY_CLASS, name, namespace)
        if row is not None:
            return int(row.document["value"])
    raise InvalidValue("priorityClass", f"WorkloadPriorityClass {name!r} does not exist")


def usable_profile(session: Session, tenant: Tenant, name: str) -> HardwareProfile:
    """The hardware profile ``name`` if ``tenant`` may use it and has its LocalQueue.

    A profile that does not exist and one the tenant may not use are refused alike, listing
    only the profiles the tenant can use: a tenant learns nothing about the others.
    """
    usable = usable_profiles(session, tenant)
    for profile in usable:
        if profile.name == name:
            return profile
    shown = ", ".join(sorted(p.name for p in usable)) or "none"
    raise InvalidValue(
        "hardwareProfile",
        f"no HardwareProfile {name!r} available to tenant {tenant.name} (available: {shown})",
    )


def usable_profiles(session: Session, tenant: Tenant) -> list[HardwareProfile]:
    """Every hardware profile ``tenant`` may use (allowed, and its LocalQueue exists)."""
    gov, _ = load_governance(session)
    out = []
    for profile in gov.hardware_profiles.values():
        allowed = not profile.allowed_tenants or tenant.name in profile.allowed_tenants
        if allowed and profile.queue_for(tenant.name) in gov.local_queues:
            out.append(profile)
    return out
