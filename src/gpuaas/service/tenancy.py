"""The tenancy boundary: no tenant uses what the provider did not give it.

Every tenant has a **root cohort** named after it (the Kueue Cohort ``<tenant>``), which belongs
to the provider and is derived from the tenant's terms (:class:`~gpuaas.store.tables.Tenant`):

- its quota is the **grant** (``capacity``, ``{flavor: {resource: quantity}}``) minus the
  nominal quota the tenant's own ClusterQueues and Cohorts already hold, so the subtree under the
  root holds exactly the grant, flavor by resource;
- its parent is the provider's choice (``parentCohort``, a provider Cohort; default none: the
  tenant's tree stands alone and can neither borrow nor lend);
- with a parent, its ``borrowingLimit`` on every flavor-resource of the subtree is what the
  provider lets the tenant borrow (``borrowing``; 0 where not given) and its ``lendingLimit``
  what others may borrow of the tenant's idle grant (``lending``; unlimited where not given).

A tenant's ClusterQueues and Cohorts live in that subtree: ``spec.cohortName`` /
``spec.parentName`` is the root or one of the tenant's own cohorts (a missing one means the
root), and every object under the root or a tenant cohort belongs to that tenant (the provider's
queues stay out of tenants' trees; two tenants share a cohort only as siblings under a provider
cohort the provider named as both roots' parent). Quota on a flavor outside the grant is refused,
zero or not, and the nominal quota of the tenant's objects must fit the grant. Fields whose
effect reaches other tenants, ``spec.fairSharing`` and cohort-level preemption
(``spec.preemption.reclaimWithinCohort``, ``spec.preemption.borrowWithinCohort``), are the
provider's: a write made with a tenant's authority may keep them as stored but not change them.
The root cohort itself is written only from the tenant's terms (an import may repeat it as it
is). Since admission never lets a cohort's subtree use more than its quota plus its
borrowingLimit, a tenant's admitted usage stays within grant + borrowing.

:func:`stage_roots` and :func:`check_boundary` are called by
:func:`gpuaas.service.governance.put_objects`, the one function every governance write goes
through (API routes, Kueue import, the demo seed, tenant changes), so every write path, present
or future, is held to these rules. Tenant priority classes are capped by the provider's ceiling
(:func:`check_priority_ceiling`) and jobs by the tenant's maximum job size
(:func:`check_job_size`, on the submission path with one cached lookup).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping, MutableMapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import ClusterQueue, Cohort, Governance, ResourceGroup
from gpuaas.model.resources import canonical_amount, describe_amount, format_amount
from gpuaas.service.errors import conflict
from gpuaas.store.db import where as db_where
from gpuaas.store.tables import GovernanceObject, Tenant

COHORT = "Cohort"
FLAVOR = "ResourceFlavor"
CLUSTER_QUEUE = "ClusterQueue"
PRIORITY_CLASS = "WorkloadPriorityClass"
API_VERSION = "kueue.x-k8s.io/v1beta2"

Key = tuple[str, str, str]
Staged = MutableMapping[Key, tuple[dict[str, Any], int | None, dict[str, Any]]]


# --- the grant ------------------------------------------------------------------------------


def nominal_totals(documents: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Summed nominal quota per flavor and resource of ClusterQueue or Cohort documents.

    Runs before the Kueue loader validates them too (to derive root cohorts): what is not
    well formed is skipped here and refused by the loader, by name.
    """
    totals: dict[str, dict[str, int]] = {}
    for doc in documents:
        for group in _items(_spec(doc).get("resourceGroups")):
            for flavor in _items(group.get("flavors")):
                for res in _items(flavor.get("resources")):
                    name, flavor_name = res.get("name"), flavor.get("name")
                    if not isinstance(name, str) or not isinstance(flavor_name, str):
                        continue
                    try:
                        amount = canonical_amount(name, res.get("nominalQuota", 0), "quota")
                    except (InvalidValue, TypeError, ValueError):
                        continue
                    per = totals.setdefault(flavor_name, {})
                    per[name] = per.get(name, 0) + amount
    return totals


def _spec(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = doc.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _items(value: object) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _amounts(terms: Mapping[str, Any] | None) -> dict[str, dict[str, int]]:
    return {
        flavor: {r: canonical_amount(r, q, "capacity") for r, q in (per or {}).items()}
        for flavor, per in (terms or {}).items()
    }


def check_capacity(
    tenant: Tenant,
    documents: Iterable[Mapping[str, Any]],
    capacity: Mapping[str, Any] | None = None,
    field: str | None = None,
) -> None:
    """The nominal quota of the tenant's ClusterQueues and Cohorts must fit its grant, flavor
    by resource; the 422 names ``field.flavor.resource`` (default: the quota's)."""
    granted = _amounts(tenant.capacity if capacity is None else capacity)
    for flavor, resources in nominal_totals(documents).items():
        for resource, used in resources.items():
            given = granted.get(flavor, {}).get(resource, 0)
            if used > given:
                where = f"spec.resourceGroups: flavor {flavor} resource {resource}"
                raise InvalidValue(
                    where if field is None else f"{field}.{flavor}.{resource}",
                    f"tenant {tenant.name}'s ClusterQueues and Cohorts would hold a nominal "
                    f"quota of {describe_amount(resource, used)}, above its capacity of "
                    f"{describe_amount(resource, given)} (the provider's grant)",
                )


# --- the root cohort ------------------------------------------------------------------------


def root_cohort_document(
    tenant: Tenant,
    owned: Iterable[Mapping[str, Any]],
    flavors: Collection[str] | None = None,
    parent: str | None = None,
) -> dict[str, Any]:
    """The tenant's root Cohort as Kueue writes it, from its terms and the nominal quota its own
    ``owned`` ClusterQueue and Cohort documents hold (see the module's description).

    Only granted flavors among ``flavors`` (the ResourceFlavors that exist; None: all) are
    written: a grant may name a flavor before the provider creates it, and the root is derived
    again whenever one of the tenant's objects changes, which it must to use the flavor.
    """
    granted = {
        f: per for f, per in _amounts(tenant.capacity).items() if flavors is None or f in flavors
    }
    held = nominal_totals(owned)
    parent = tenant.parent_cohort if parent is None else parent
    borrowing = _amounts(tenant.borrowing)
    lending = _amounts(tenant.lending)
    resources = sorted({r for f in granted for r in granted[f]} | _held_in(held, granted))
    flavors = []
    for flavor in sorted(granted):
        entries = []
        for resource in resources:
            given = granted[flavor].get(resource, 0)
            left = max(0, given - held.get(flavor, {}).get(resource, 0))
            entry: dict[str, Any] = {
                "name": resource,
                "nominalQuota": format_amount(resource, left),
            }
            if parent:
                limit = borrowing.get(flavor, {}).get(resource, 0)
                entry["borrowingLimit"] = format_amount(resource, limit)
                lend = lending.get(flavor, {}).get(resource)
                if lend is not None:
                    entry["lendingLimit"] = format_amount(resource, lend)
            entries.append(entry)
        flavors.append({"name": flavor, "resources": entries})
    spec: dict[str, Any] = {}
    if parent:
        spec["parentName"] = parent
    if flavors and resources:
        spec["resourceGroups"] = [{"coveredResources": resources, "flavors": flavors}]
    return {
        "apiVersion": API_VERSION,
        "kind": COHORT,
        "metadata": {"name": tenant.name},
        "spec": spec,
    }


def _held_in(held: Mapping[str, Mapping[str, int]], granted: Mapping[str, Any]) -> set[str]:
    """Resources the tenant's objects name on granted flavors (each needs a borrowing limit)."""
    return {r for f, per in held.items() if f in granted for r in per}


def all_tenants(session: Session) -> dict[int, Tenant]:
    return {t.id: t for t in session.scalars(select(Tenant))}


def stage_roots(
    session: Session,
    tenants: Mapping[int, Tenant],
    staged: Staged,
    stored: Mapping[Key, GovernanceObject],
    touched: Iterable[int] = (),
) -> tuple[set[int], dict[str, dict[str, Any]]]:
    """Before validation: put a tenant's ClusterQueue or Cohort that names no cohort under its
    root, and stage the derived root cohort of every tenant the change touches.

    Returns the touched tenants and the root documents the change itself carried (an import may
    repeat a root, which :func:`check_boundary` compares with the derived one).
    """
    roots = {t.name: t for t in tenants.values()}
    affected = set(touched)
    carried: dict[str, dict[str, Any]] = {}
    for key, (doc, owner, _) in list(staged.items()):
        kind, _, name = key
        if kind not in (CLUSTER_QUEUE, COHORT):
            continue
        previous = stored.get(key)
        if previous is not None and previous.tenant_id is not None:
            affected.add(previous.tenant_id)
        if kind == COHORT and name in roots:
            carried[name] = doc
            affected.add(roots[name].id)
            continue
        if owner is None:
            continue
        affected.add(owner)
        spec = doc.get("spec")
        field = "cohortName" if kind == CLUSTER_QUEUE else "parentName"
        if isinstance(spec, dict) and not spec.get(field):
            doc["spec"] = {**spec, field: tenants[owner].name}
    documents = {k: r.document for k, r in stored.items()}
    documents.update({k: v[0] for k, v in staged.items()})
    owners = {k: r.tenant_id for k, r in stored.items()}
    owners.update({k: v[1] for k, v in staged.items()})
    flavors = {name for kind, _, name in documents if kind == FLAVOR}
    for tenant_id in sorted(affected):
        tenant = tenants.get(tenant_id)
        if tenant is None:
            continue
        _check_parent(tenant, owners, roots)
        root = root_cohort_document(tenant, owned_documents(documents, owners, tenant), flavors)
        key = (COHORT, "", tenant.name)
        row = stored.get(key)
        if row is not None and row.tenant_id != tenant.id:
            raise conflict(
                f"a Cohort named {tenant.name} exists and is not tenant {tenant.name}'s root "
                "cohort; rename or delete it first",
                "name",
            )
        if tenant.name in carried or row is None or row.document != root:
            staged[key] = (root, tenant.id, {})
    return affected, carried


def owned_documents(
    documents: Mapping[Key, Mapping[str, Any]],
    owners: Mapping[Key, int | None],
    tenant: Tenant,
) -> list[Mapping[str, Any]]:
    """The tenant's own ClusterQueue and Cohort documents (its root excluded)."""
    return [
        doc
        for key, doc in documents.items()
        if key[0] in (CLUSTER_QUEUE, COHORT)
        and owners.get(key) == tenant.id
        and not (key[0] == COHORT and key[2] == tenant.name)
    ]


def _check_parent(
    tenant: Tenant, owners: Mapping[Key, int | None], roots: Mapping[str, Tenant]
) -> None:
    parent = tenant.parent_cohort
    if parent is None:
        return
    key = (COHORT, "", parent)
    if key not in owners or owners[key] is not None or parent in roots:
        raise InvalidValue(
            "parentCohort",
            f"must be one of the provider's Cohorts, got {parent!r} "
            "(create it first; a tenant's own or root cohort cannot be a parent)",
        )


# --- the boundary ---------------------------------------------------------------------------


def check_boundary(
    gov: Governance,
    tenants: Mapping[int, Tenant],
    staged: Staged,
    owners: Mapping[Key, int | None],
    documents: Mapping[Key, Mapping[str, Any]],
    affected: set[int],
    carried: Mapping[str, Mapping[str, Any]],
    previous: Callable[[], Governance],
    by_provider: bool,
    source: str,
) -> None:
    """After validation: every rule of the module's description, on the validated ``gov``.

    ``previous`` builds the configuration as stored (needed only to compare the provider's
    fields of a tenant's write); ``carried`` are root cohorts a change wrote itself.
    """
    roots = {t.name: t for t in tenants.values()}
    inside = _subtrees(gov, owners, tenants)
    for name, doc in carried.items():
        _check_carried_root(gov, name, doc, source)
    for key, (_, owner, _) in staged.items():
        kind, _, name = key
        if kind not in (CLUSTER_QUEUE, COHORT) or (kind == COHORT and name in roots):
            continue
        where = f"{source}: {kind} {name}"
        parent = _parent_of(gov, kind, name)
        if owner is None:
            if parent in inside:
                raise InvalidValue(
                    f"{where}: spec.{'cohortName' if kind == CLUSTER_QUEUE else 'parentName'}",
                    f"Cohort {parent} is in tenant {tenants[inside[parent]].name}'s tree; only "
                    "that tenant's own objects go there (give the object that tenant as owner)",
                )
            continue
        tenant = tenants[owner]
        if inside.get(parent or "") != owner:
            field = "cohortName" if kind == CLUSTER_QUEUE else "parentName"
            raise InvalidValue(
                f"{where}: spec.{field}",
                f"must be tenant {tenant.name}'s root cohort {tenant.name} or one of its own "
                f"cohorts under it; {parent!r} is outside the tenant's tree",
            )
        if not by_provider:
            _check_provider_fields(gov, kind, name, previous, where)
    for kind, name, owner in _members_of_tenant_trees(gov, inside, owners):
        tenant_id = inside[_parent_of(gov, kind, name) or ""]
        if owner != tenant_id and tenant_id in affected:
            cohort = _parent_of(gov, kind, name)
            staged_cohort = (COHORT, "", cohort or "") in staged
            if staged_cohort:  # a tenant's new cohort took a name already in use
                raise InvalidValue(
                    f"{source}: Cohort {cohort}: metadata.name",
                    f"the name {cohort!r} is already used by another cohort tree; choose another",
                )
            raise InvalidValue(
                f"{source}: {kind} {name}",
                f"is in tenant {tenants[tenant_id].name}'s tree but does not belong to it",
            )
    for tenant_id in sorted(affected):
        tenant = tenants.get(tenant_id)
        if tenant is None:
            continue
        for key, owner in owners.items():
            kind, _, name = key
            if owner == tenant_id and kind in (CLUSTER_QUEUE, COHORT) and name != tenant.name:
                _check_grant_flavors(gov, kind, name, tenant, f"{source}: {kind} {name}")
        check_capacity(tenant, owned_documents(documents, owners, tenant))


def _subtrees(
    gov: Governance, owners: Mapping[Key, int | None], tenants: Mapping[int, Tenant]
) -> dict[str, int]:
    """Cohort name -> the tenant whose tree it is in: its root, and the tenant's own cohorts
    whose chain of parents reaches that root through the tenant's own cohorts."""
    by_name = {t.name: t.id for t in tenants.values()}
    inside = {name: tid for name, tid in by_name.items() if name in gov.cohort_names()}
    for name in gov.cohort_names():
        owner = owners.get((COHORT, "", name))
        if owner is None or name in by_name:
            continue
        seen: set[str] = set()
        current: str | None = name
        while current is not None and current not in seen:
            seen.add(current)
            if current == tenants[owner].name:
                inside[name] = owner
                break
            if owners.get((COHORT, "", current)) != owner:
                break
            current = gov.cohort(current).parent
    return inside


def _parent_of(gov: Governance, kind: str, name: str) -> str | None:
    if kind == CLUSTER_QUEUE:
        return gov.cluster_queues[name].cohort
    return gov.cohort(name).parent


def _members_of_tenant_trees(
    gov: Governance, inside: Mapping[str, int], owners: Mapping[Key, int | None]
) -> Iterable[tuple[str, str, int | None]]:
    """Every ClusterQueue and Cohort whose parent is in a tenant's tree, with its owner."""
    for name, cq in gov.cluster_queues.items():
        if cq.cohort in inside:
            yield CLUSTER_QUEUE, name, owners.get((CLUSTER_QUEUE, "", name))
    for name in gov.cohort_names():
        parent = gov.cohort(name).parent
        if parent in inside:
            yield COHORT, name, owners.get((COHORT, "", name))


def _groups(gov: Governance, kind: str, name: str) -> tuple[ResourceGroup, ...]:
    if kind == CLUSTER_QUEUE:
        return gov.cluster_queues[name].resource_groups
    return gov.cohort(name).resource_groups


def _check_grant_flavors(gov: Governance, kind: str, name: str, tenant: Tenant, where: str) -> None:
    granted = tenant.capacity or {}
    for gi, group in enumerate(_groups(gov, kind, name)):
        for fi, flavor in enumerate(group.flavors):
            if flavor.name not in granted:
                raise InvalidValue(
                    f"{where}: spec.resourceGroups[{gi}].flavors[{fi}].name",
                    f"flavor {flavor.name} is not granted to tenant {tenant.name} (granted: "
                    f"{', '.join(sorted(granted)) or 'none'}); quota on it is refused, even 0",
                )


def _provider_fields(obj: ClusterQueue | Cohort) -> dict[str, object]:
    """The fields of a tenant's object whose effect reaches beyond the tenant's tree."""
    fields: dict[str, object] = {"spec.fairSharing.weight": obj.fair_sharing_weight}
    if isinstance(obj, ClusterQueue):
        p = obj.preemption
        fields["spec.preemption.reclaimWithinCohort"] = p.reclaim_within_cohort
        fields["spec.preemption.borrowWithinCohort"] = (
            p.borrow_within_cohort,
            p.max_priority_threshold,
        )
    return fields


def _check_provider_fields(
    gov: Governance, kind: str, name: str, previous: Callable[[], Governance], where: str
) -> None:
    before_gov = previous()
    if kind == CLUSTER_QUEUE:
        now: ClusterQueue | Cohort = gov.cluster_queues[name]
        before: ClusterQueue | Cohort = before_gov.cluster_queues.get(name) or ClusterQueue(name)
    else:
        now = gov.cohort(name)
        before = before_gov.cohorts.get(name) or Cohort(name)
    old = _provider_fields(before)
    for field, value in _provider_fields(now).items():
        if value != old[field]:
            raise InvalidValue(
                f"{where}: {field}",
                "is set by the provider (it reaches beyond the tenant's own tree); a tenant "
                "may keep it as it is but not change it",
            )


def _check_carried_root(gov: Governance, name: str, doc: Mapping[str, Any], source: str) -> None:
    """A root cohort a change carries must be the derived one (say, an export re-imported)."""
    from gpuaas.supply.kueue import load_objects

    flavors = [
        {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": f}}
        for f in gov.flavors
    ]
    try:
        written = load_objects([*flavors, dict(doc)], source).cohorts.get(name)
    except InvalidValue:
        written = None
    if written != gov.cohorts.get(name):
        raise InvalidValue(
            f"{source}: Cohort {name}: spec",
            f"Cohort {name} is tenant {name}'s root cohort: the provider sets it through the "
            f"tenant's terms (PATCH /v1/tenants/{name}: capacity, borrowing, lending, "
            "parentCohort), not directly",
        )


def check_root_write(row: GovernanceObject, tenants: Iterable[Tenant]) -> None:
    """409 for a direct delete of a tenant's root cohort, or of a provider cohort a tenant's
    root hangs from."""
    if row.kind != COHORT:
        return
    for tenant in tenants:
        if row.name == tenant.name and row.tenant_id == tenant.id:
            raise conflict(
                f"Cohort {row.name} is tenant {tenant.name}'s root cohort; it goes with the tenant"
            )
        if row.tenant_id is None and tenant.parent_cohort == row.name:
            raise conflict(
                f"Cohort {row.name} is the parent of tenant {tenant.name}'s root cohort; "
                "change the tenant's parentCohort first"
            )


# --- priority ceiling -----------------------------------------------------------------------


def check_priority_ceiling(
    tenant: Tenant, value: int, documents: Mapping[Key, Mapping[str, Any]], field: str
) -> None:
    """A tenant's priority class may not rank above the provider's ceiling: the tenant's
    ``priorityCeiling``, else the highest value of the provider's own priority classes (no
    ceiling while the provider has neither)."""
    ceiling = tenant.priority_ceiling
    # a 409 naming ``field``: the value is a valid priority, the stored ceiling refuses it
    what = f"tenant {tenant.name}'s priority ceiling"
    if ceiling is None:
        values = [
            int(doc.get("value", 0))
            for key, doc in documents.items()
            if key[0] == PRIORITY_CLASS and not key[1]
        ]
        if not values:
            return
        ceiling = max(values)
        what = "the provider's highest priority class"
    if value > ceiling:
        raise conflict(f"{field}: {value} is above {what} ({ceiling})", field)


# --- maximum job size -----------------------------------------------------------------------

#: the pseudo-resource of ``maxJob`` that counts a job's pods
PODS = "pods"
_lock = threading.Lock()
_job_limits: dict[tuple[str, str], dict[int, dict[str, int]]] = {}


def job_limits(session: Session, version: str) -> dict[int, dict[str, int]]:
    """Every tenant's maximum job size, loaded once per database and ``governance.version``
    (a change of a tenant's terms moves the version)."""
    key = (db_where(session), version)
    found = _job_limits.get(key)
    if found is None:
        rows = session.execute(select(Tenant.id, Tenant.max_job)).all()
        found = {
            tid: {r: canonical_amount(r, q, "maxJob") for r, q in (limits or {}).items()}
            for tid, limits in rows
            if limits
        }
        with _lock:
            if len(_job_limits) > 64:
                _job_limits.clear()
            _job_limits[key] = found
    return found


def check_job_size(
    session: Session, version: str, tenant_id: int, pod_sets: Iterable[Mapping[str, Any]]
) -> None:
    """A job may not ask, summed over its pods, for more of a resource than the tenant's
    ``maxJob`` allows; InvalidValue names ``podSets`` and both numbers. ``maxJob.pods`` (as
    Kubernetes' ResourceQuota counts ``pods``) bounds the job's pods in all, below the API's
    own 10,000: admitting a job costs work and a stored placement in proportion to its pods."""
    limits = job_limits(session, version).get(tenant_id)
    if not limits:
        return
    totals: dict[str, int] = {}
    for ps in pod_sets:
        for resource, amount in ps["requests"].items():
            totals[resource] = totals.get(resource, 0) + amount * int(ps["count"])
    if PODS in limits:
        totals[PODS] = sum(int(ps["count"]) for ps in pod_sets)
    for resource, limit in limits.items():
        asked = totals.get(resource, 0)
        if asked > limit:
            raise InvalidValue(
                "podSets",
                f"the job asks for {describe_amount(resource, asked)} ({resource}) in all, above "
                f"the tenant's maximum job size of {describe_amount(resource, limit)} (maxJob)",
            )
