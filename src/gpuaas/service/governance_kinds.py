"""What each verb of each governance kind does, HTTP aside: the service half of the one
resource table (:mod:`gpuaas.model.api_kinds`).

One class per kind, one method per verb (``list``, ``get``, ``create``, ``update``, ``delete``),
each taking :class:`At`: the session, the caller and the tenant whose routes were called (None:
the provider's routes). The router has already authenticated the caller, checked the tenant
role (read for reads, admin for writes; :func:`gpuaas.service.auth.tenant_for`) or the platform
role, and validated the body, so a method holds what differs between kinds only: which rows a
scope sees, who owns a new object, and the tenant's own views (its profiles, its classes over
the global ones). Every write goes through :func:`gpuaas.service.governance.put_object`, which
validates it with everything stored, so an invalid configuration is never stored.

Most kinds carry a Kueue ``spec`` (:class:`SpecKind`); local queues and priority classes have
bodies of their own.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import BaseModel
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuaas.model.job_state import JobState
from gpuaas.service import governance as gv
from gpuaas.service.auth import Principal
from gpuaas.service.errors import ApiError, conflict, forbidden, invalid, missing, not_found
from gpuaas.service.fleet import text_cursor
from gpuaas.service.models.common import MAX_LIMIT, Page, paginate
from gpuaas.service.models.governance import (
    ClusterQueueIn,
    ClusterQueueOut,
    LocalQueueIn,
    LocalQueueOut,
    ObjectIn,
    ObjectOut,
    PriorityClassIn,
    PriorityClassOut,
)
from gpuaas.service.settings import Settings
from gpuaas.store.tables import GovernanceObject, Job, Tenant


@dataclass(frozen=True, slots=True)
class At:
    """Where a verb runs: ``tenant`` is the tenant of ``/v1/tenants/{tenant}/...`` (its role
    checked already), None on the provider's routes; ``settings`` the server's (for kinds that
    reach outside the database, volumes)."""

    session: Session
    principal: Principal
    tenant: Tenant | None = None
    settings: Settings | None = None


# --- shared helpers ------------------------------------------------------------------------


def tenant_names(session: Session) -> dict[int, str]:
    return dict(session.execute(select(Tenant.id, Tenant.name)).all())


def object_out(row: GovernanceObject, tenants: Mapping[int, str]) -> ObjectOut:
    return ObjectOut(
        kind=row.kind,
        name=row.name,
        tenant=None if row.tenant_id is None else tenants.get(row.tenant_id),
        spec=row.document.get("spec") or {},
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def object_name(body_name: str | None, path_name: str | None, *, label: bool = False) -> str:
    """The object's name: from the body on create, from the path on replace (they must agree)."""
    if path_name is not None and body_name is not None and body_name != path_name:
        raise invalid("name", f"{body_name!r} differs from the name in the path {path_name!r}")
    name = path_name if path_name is not None else body_name
    if name is None:
        raise invalid("name", "is required")
    return gv.check_name("name", name, label=label)


def of_kind(kind: str, namespace: str = "") -> Any:
    return select(GovernanceObject).where(
        GovernanceObject.kind == kind, GovernanceObject.namespace == namespace
    )


# --- a tenant's names for cluster-wide kinds ------------------------------------------------
# ClusterQueues, Cohorts and HardwareProfiles have one name in the whole cluster (the engine
# and the Kueue export use it as the object's id), yet a tenant names its own without knowing
# others' names, and must learn nothing of them: a name another tenant holds may not answer
# 409. So a tenant's object is stored under the name it gives when that name is free, and
# under ``<tenant>.<name>`` when another tenant holds it; on the tenant's routes both read,
# list and are referred to (a LocalQueue's ``clusterQueue``, a queue's ``cohortName``, a
# cohort's ``parentName``, a job's ``hardwareProfile``) by the name the tenant gave. A name
# the tenant gives through its routes is a DNS-1123 label (no ``.``), so ``<tenant>.`` names
# are the tenant's alone; the provider may give such a name only to an object of that
# tenant. Only the tenant's own objects and the provider's can still answer 409 (the
# provider's objects are not secret). What the tenant reads of its jobs (ClusterQueue, reason,
# events) says its names too (:func:`in_tenant_terms`); the stored ``<tenant>.<name>`` shows
# only to the provider (its lists, ``/v1/jobs``, the Kueue export, whose ids must be distinct).


def own_name(tenant: Tenant, name: str) -> str:
    """The name a tenant's object called ``name`` is stored under when another holds ``name``."""
    return f"{tenant.name}.{name}"


def shown_name(tenant: Tenant, stored: str) -> str:
    """The name the tenant gave an object stored as ``stored``."""
    return stored.removeprefix(f"{tenant.name}.")


def in_tenant_terms(tenant: str, value: Any) -> Any:
    """``value`` (a stored name, a reason's sentence or field, or a structure of them) with
    every ``<tenant>.<name>`` of ``tenant``'s own objects said as the tenant named them: what
    the tenant reads never shows that another tenant holds ``<name>``."""
    if isinstance(value, str):
        if f"{tenant}." not in value:  # nothing to say otherwise (most values: cheap to tell)
            return value
        return _own_prefix(tenant).sub("", value)
    if isinstance(value, Mapping):
        return {k: in_tenant_terms(tenant, v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [in_tenant_terms(tenant, v) for v in value]
    return value


@lru_cache(maxsize=1024)
def _own_prefix(tenant: str) -> re.Pattern[str]:
    """``<tenant>.`` before a name: a whole name token only, and never a domain-prefixed
    resource (``nvidia.com/gpu`` for a tenant named ``nvidia``): governance names hold no
    ``/``."""
    return re.compile(
        rf"(?<![-a-z0-9.]){re.escape(tenant)}\.(?=[a-z0-9][-a-z0-9.]*(?![-a-z0-9./]))"
    )


def find_own(session: Session, kind: str, tenant: Tenant, name: str) -> GovernanceObject | None:
    """The tenant's own object that it calls ``name`` (stored as ``<tenant>.<name>`` or as
    ``name``), or None."""
    for stored in (own_name(tenant, name), name):
        row = gv.find_object(session, kind, stored)
        if row is not None and row.tenant_id == tenant.id:
            return row
    return None


def stored_reference(session: Session, kind: str, tenant: Tenant, name: Any) -> Any:
    """What a tenant's reference ``name`` to an object of ``kind`` points at: its own object's
    stored name if it has one of that name, else ``name`` as given."""
    if not isinstance(name, str) or not name:
        return name
    row = find_own(session, kind, tenant, name)
    return row.name if row is not None else name


def name_to_store(session: Session, kind: str, tenant: Tenant, name: str) -> str:
    """The name a tenant's new object called ``name`` is stored under (see above); 409 only
    when the tenant already has one or the provider holds the name."""
    gv.check_name("name", name, label=True)
    if find_own(session, kind, tenant, name) is not None:
        raise conflict(f"{kind} {name} already exists in tenant {tenant.name}", "name")
    held = gv.find_object(session, kind, name)
    if held is None:
        return name
    if held.tenant_id is None:
        raise conflict(f"{kind} {name} already exists (the provider's)", "name")
    return own_name(tenant, name)  # another tenant's: the caller learns nothing of it


def check_provider_name(session: Session, name: str, owner: int | None) -> None:
    """A provider's object may take a ``<tenant>.`` name only for that tenant (those names
    are where a tenant's own objects go)."""
    first, dot, _ = name.partition(".")
    if not dot:
        return
    holder = session.scalar(select(Tenant.id).where(Tenant.name == first))
    if holder is not None and holder != owner:
        raise invalid(
            "name", f"names beginning {first + '.'!r} are tenant {first}'s; give it to {first}"
        )


def _page(
    session: Session, stmt: Any, limit: int, after: str | None
) -> tuple[list[GovernanceObject], str | None]:
    return paginate(session, stmt, GovernanceObject.name, limit, text_cursor(after))


def _check_limit(limit: int) -> None:
    if limit < 1 or limit > MAX_LIMIT:
        raise invalid("limit", f"must be between 1 and {MAX_LIMIT}, got {limit}")


class TenantNamed:
    """The shape of a kind whose objects are rows of one tenant, named uniquely in it
    (budgets, datasets): ``row_type`` has ``tenant_id``, ``name``, ``created_at`` and
    ``updated_at``. Its verbs find the row (404 naming the kind), page the rows by name, check a
    new name (required, a label, not taken: 409) and a body's name against the path's (422),
    so each kind writes only what its objects mean."""

    kind: str
    row_type: Any

    @staticmethod
    def _tenant(at: At) -> Tenant:
        assert at.tenant is not None
        return at.tenant

    def _find(self, session: Session, tenant_id: int, name: str) -> Any:
        table = self.row_type
        return session.scalar(select(table).where(table.tenant_id == tenant_id, table.name == name))

    def _row(self, at: At, name: str) -> Any:
        tenant = self._tenant(at)
        row = self._find(at.session, tenant.id, name)
        if row is None:
            raise not_found(f"{self.kind} {name} of tenant {tenant.name}")
        return row

    def _rows(self, at: At, limit: int, after: str | None) -> tuple[list[Any], str | None]:
        """A page of the tenant's rows by name, and the cursor of the next (None: the last)."""
        _check_limit(limit)
        table = self.row_type
        stmt = select(table).where(table.tenant_id == self._tenant(at).id)
        if after is not None:
            stmt = stmt.where(table.name > after)
        rows = list(at.session.scalars(stmt.order_by(table.name).limit(limit + 1)))
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, rows[-1].name if more and rows else None

    def _add(self, at: At, given: str | None, values_of: Callable[[], Mapping[str, Any]]) -> Any:
        """Store a new row named ``given`` with ``values_of()`` (the body's checked values;
        the name is checked first, the values next, the conflict last)."""
        tenant = self._tenant(at)
        if given is None:
            raise invalid("name", "is required")
        name = gv.check_name("name", given, label=True)
        values = values_of()
        if self._find(at.session, tenant.id, name) is not None:
            raise conflict(f"{self.kind} {name} already exists in {tenant.name}", "name")
        now = time.time()
        row = self.row_type(tenant_id=tenant.id, name=name, created_at=now, updated_at=now,
                            **values)  # fmt: skip
        at.session.add(row)
        return row

    @staticmethod
    def _same_name(given: str | None, name: str) -> None:
        if given is not None and given != name:
            raise invalid("name", f"{given!r} differs from the name in the path {name!r}")


def create_object(
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


def replace_object(
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


# --- kinds carrying a Kueue spec -----------------------------------------------------------


def spec_json(spec: Any) -> dict[str, Any]:
    """A request's spec as the JSON it was sent as: a typed spec (:class:`FlavorSpec`,
    ``models.kueue_specs``) held pydantic's rules; the Kueue loader reads the JSON."""
    if isinstance(spec, BaseModel):
        return spec.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return spec


class SpecKind:
    """A kind whose body is ``{name, spec}`` and whose view is :class:`ObjectOut`.

    Provider routes: platform roles see every object, others the provider's own (a tenant's
    object is read under its tenant); the provider creates objects of its own and replaces
    any, keeping the owner. Tenant routes: the objects the tenant owns, created as its own.
    """

    kind: str = ""

    # hooks the kinds override
    def owned(self, at: At, name: str, *, write: bool) -> GovernanceObject:
        """The tenant's object ``name``; another tenant's is answered exactly like a missing
        one."""
        assert at.tenant is not None
        row = find_own(at.session, self.kind, at.tenant, name)
        if row is None:
            raise not_found(f"{self.kind} {name} of tenant {at.tenant.name}")
        return row

    def spec_of(self, at: At, spec: dict[str, Any], owner: str | None) -> dict[str, Any]:
        """The spec to store for an object owned by tenant ``owner`` (None: the provider)."""
        return spec

    def owner_of(self, at: At, body: ObjectIn, row: GovernanceObject | None) -> int | None:
        """Who owns the object a provider route writes: the provider on create, the current
        owner on replace."""
        return None if row is None else row.tenant_id

    def provider_list(self, at: At, body_filters: Mapping[str, Any]) -> Any:
        stmt = of_kind(self.kind)
        if not at.principal.sees_everything:
            stmt = stmt.where(GovernanceObject.tenant_id.is_(None))
        return stmt

    def view(self, at: At, out: ObjectOut) -> ObjectOut:
        return out

    def tenant_spec(self, at: At, spec: dict[str, Any]) -> dict[str, Any]:
        """A spec a tenant wrote, its references to its own cohorts as stored."""
        assert at.tenant is not None
        for key in ("cohortName", "parentName"):
            if key in spec:
                spec = {**spec, key: stored_reference(at.session, gv.COHORT, at.tenant, spec[key])}
        return spec

    def shown(self, at: At, out: ObjectOut) -> ObjectOut:
        """``out`` as the tenant of ``at`` calls it and what it refers to (see above)."""
        if at.tenant is None:
            return out
        out.name = shown_name(at.tenant, out.name)
        for key in ("cohortName", "parentName"):
            if isinstance(out.spec.get(key), str):
                out.spec = {**out.spec, key: shown_name(at.tenant, out.spec[key])}
        return self.view(at, out)

    # the verbs
    def list(self, at: At, limit: int, after: str | None, **filters: Any) -> Page[Any]:
        if at.tenant is None:
            stmt = self.provider_list(at, filters)
            names = tenant_names(at.session)
        else:
            stmt = of_kind(self.kind).where(GovernanceObject.tenant_id == at.tenant.id)
            names = {at.tenant.id: at.tenant.name}
        rows, cursor = _page(at.session, stmt, limit, after)
        return Page(items=[self.shown(at, object_out(r, names)) for r in rows], next=cursor)

    def get(self, at: At, name: str) -> Any:
        if at.tenant is None:
            row = gv.get_object(at.session, self.kind, name)
            if row.tenant_id is not None and not at.principal.sees_everything:
                raise not_found(f"{self.kind} {name}")
            return object_out(row, tenant_names(at.session))
        row = self.owned(at, name, write=False)
        return self.shown(at, object_out(row, tenant_names(at.session)))

    def create(self, at: At, body: ObjectIn) -> Any:
        body.spec = spec_json(body.spec)
        if at.tenant is None:
            owner = self.owner_of(at, body, None)
            names = tenant_names(at.session)
            spec = self.spec_of(at, body.spec, None if owner is None else names[owner])
            name = object_name(body.name, None)
            check_provider_name(at.session, name, owner)
            row = create_object(
                at.session, self.kind, name, {"spec": spec}, owner, by_provider=True
            )
            return object_out(row, names)
        spec = self.tenant_spec(at, self.spec_of(at, body.spec, at.tenant.name))
        name = name_to_store(at.session, self.kind, at.tenant, object_name(body.name, None))
        row = create_object(at.session, self.kind, name, {"spec": spec}, at.tenant.id)
        return self.shown(at, object_out(row, {at.tenant.id: at.tenant.name}))

    def update(self, at: At, name: str, body: ObjectIn) -> Any:
        if gv.name_problem(name) is not None:  # the path names nothing that can exist
            raise not_found(f"{self.kind} {name[:100]!r}")
        object_name(body.name, name)
        body.spec = spec_json(body.spec)
        if at.tenant is None:
            row = gv.get_object(at.session, self.kind, name)
            owner = self.owner_of(at, body, row)
            names = tenant_names(at.session)
            spec = self.spec_of(at, body.spec, None if owner is None else names[owner])
            row = replace_object(at.session, row, {"spec": spec}, owner, by_provider=True)
            return object_out(row, names)
        spec = self.tenant_spec(at, self.spec_of(at, body.spec, at.tenant.name))
        row = replace_object(
            at.session, self.owned(at, name, write=True), {"spec": spec}, at.tenant.id
        )
        return self.shown(at, object_out(row, {at.tenant.id: at.tenant.name}))

    def delete(self, at: At, name: str) -> None:
        if at.tenant is None:
            row = gv.get_object(at.session, self.kind, name)
        else:
            row = self.owned(at, name, write=True)
        gv.delete_object(at.session, row)


class Flavors(SpecKind):
    """ResourceFlavors: the provider's only. The body's spec is a :class:`FlavorSpec` (its
    rules in the OpenAPI document); a ``topologyName`` naming no Topology is a 404 naming
    ``spec.topologyName``, as a reference to nothing is."""

    kind = gv.FLAVOR

    def spec_of(self, at: At, spec: dict[str, Any], owner: str | None) -> dict[str, Any]:
        out = spec_json(spec)
        topology = out.get("topologyName")
        if isinstance(topology, str) and gv.find_object(at.session, "Topology", topology) is None:
            raise missing("spec.topologyName", f"no Topology named {topology!r}")
        return out


class Cohorts(SpecKind):
    """Provider cohorts, and a tenant's own inside its tree (``parentName``: its root cohort,
    the default, or another of its cohorts; their nominal quota counts against its grant). The
    root cohort, named after the tenant, is listed and read under the tenant but written by the
    provider only (the tenant's terms); deleting a cohort is refused (409) while a ClusterQueue
    or Cohort is still in it."""

    kind = gv.COHORT

    def owned(self, at: At, name: str, *, write: bool) -> GovernanceObject:
        row = super().owned(at, name, write=write)
        assert at.tenant is not None
        if write and name == at.tenant.name:
            raise forbidden(
                f"Cohort {name} is tenant {at.tenant.name}'s root cohort: the provider sets it "
                "(the tenant's capacity, borrowing, lending and parentCohort)"
            )
        return row


def _owner_id(session: Session, tenant: str | None) -> int | None:
    if tenant is None:
        return None
    row = None
    if "\x00" not in tenant:
        row = session.scalar(select(Tenant).where(Tenant.name == tenant))
    if row is None:  # a reference to what does not exist: 404, as a path would answer
        raise ApiError(404, f"tenant: no tenant named {tenant!r}", "tenant")
    return row.id


class ClusterQueues(SpecKind):
    """ClusterQueues: the provider's (``tenant`` names the owner, whose capacity bounds the
    quota: leave it out to make the queue the provider's) and a tenant's own (all its queues'
    nominal quota must fit its capacity). The provider's list filters by owner (``tenant``)."""

    kind = gv.CLUSTER_QUEUE

    def owner_of(self, at: At, body: ObjectIn, row: GovernanceObject | None) -> int | None:
        assert isinstance(body, ClusterQueueIn)
        return _owner_id(at.session, body.tenant)

    def list(self, at: At, limit: int, after: str | None, **filters: Any) -> Page[Any]:
        page = super().list(at, limit, after, **filters)
        return Page(items=self._with_status(at, page.items), next=page.next)

    def get(self, at: At, name: str) -> Any:
        return self._with_status(at, [super().get(at, name)])[0]

    def create(self, at: At, body: ObjectIn) -> Any:
        return self._with_status(at, [super().create(at, body)], written=True)[0]

    def update(self, at: At, name: str, body: ObjectIn) -> Any:
        return self._with_status(at, [super().update(at, name, body)], written=True)[0]

    @staticmethod
    def _with_status(
        at: At, items: list[ObjectOut], written: bool = False
    ) -> list[ClusterQueueOut]:
        """``items`` with each queue's status (:mod:`gpuaas.service.queue_status`), all of
        them from one grouped query; after a write (``written``), against the governance
        just stored, not the server's cached copy."""
        # imported here: queue_status reads jobs (service.jobs), which imports this module
        from gpuaas.service.queue_status import cluster_queue_statuses

        stored = [o.name for o in items]
        if at.tenant is not None:  # the names the tenant gave, back to the stored ones
            own = at.session.scalars(
                of_kind(gv.CLUSTER_QUEUE)
                .where(GovernanceObject.tenant_id == at.tenant.id)
                .with_only_columns(GovernanceObject.name)
            )
            given = {shown_name(at.tenant, n): n for n in own}
            stored = [given.get(n, n) for n in stored]
        gov = gv.load_governance(at.session)[0] if written else None
        statuses = cluster_queue_statuses(at.session, stored, tenant_names(at.session), gov)
        return [
            ClusterQueueOut(**o.model_dump(), status=statuses.get(name))
            for o, name in zip(items, stored, strict=True)
        ]

    def provider_list(self, at: At, body_filters: Mapping[str, Any]) -> Any:
        stmt = of_kind(self.kind)
        tenant = body_filters.get("tenant")
        if tenant is not None:
            owner = None
            if "\x00" not in tenant:
                owner = at.session.scalar(select(Tenant.id).where(Tenant.name == tenant))
            stmt = stmt.where(GovernanceObject.tenant_id == (owner if owner is not None else -1))
        return stmt


class HardwareProfiles(SpecKind):
    """Hardware profiles: the provider's (serving the tenants of ``spec.allowedTenants``) and
    a tenant's own, which serve that tenant only through one of its LocalQueues. A tenant
    lists and reads the profiles it may use, its own and the provider's allowed for it, and
    never sees which other tenants a profile serves."""

    kind = gv.HARDWARE_PROFILE

    def spec_of(self, at: At, spec: dict[str, Any], owner: str | None) -> dict[str, Any]:
        if owner is None:
            return spec
        allowed = spec.get("allowedTenants")
        if allowed not in (None, [owner]):
            raise invalid("spec.allowedTenants", f"a tenant's own profile serves only {owner}")
        queue = spec.get("localQueue")
        session = at.session
        if isinstance(queue, str) and gv.find_object(session, gv.LOCAL_QUEUE, queue, owner) is None:
            own = sorted(
                session.scalars(
                    of_kind(gv.LOCAL_QUEUE, owner).with_only_columns(GovernanceObject.name)
                )
            )
            raise invalid(
                "spec.localQueue",
                f"tenant {owner} has no LocalQueue {queue!r} "
                f"(its queues: {', '.join(own) or 'none'})",
            )
        return {**spec, "allowedTenants": [owner]}

    def owned(self, at: At, name: str, *, write: bool) -> GovernanceObject:
        """To write: the tenant's own profile; to read: also one it may use."""
        assert at.tenant is not None
        own = find_own(at.session, self.kind, at.tenant, name)
        if write or own is not None:
            if own is None:
                raise not_found(f"HardwareProfile {name} of tenant {at.tenant.name}")
            return own
        row = gv.find_object(at.session, self.kind, name)
        if row is None or (
            row.tenant_id != at.tenant.id
            and name not in {hp.name for hp in gv.usable_profiles(at.session, at.tenant)}
        ):
            raise not_found(f"HardwareProfile {name} for tenant {at.tenant.name}")
        return row

    def view(self, at: At, out: ObjectOut) -> ObjectOut:
        if at.tenant is not None and "allowedTenants" in out.spec:
            out.spec = {**out.spec, "allowedTenants": [at.tenant.name]}
        return out

    def provider_list(self, at: At, body_filters: Mapping[str, Any]) -> Any:
        return of_kind(self.kind)

    def list(self, at: At, limit: int, after: str | None, **filters: Any) -> Page[Any]:
        """A tenant's list: the profiles it may use, by name."""
        if at.tenant is None:
            return super().list(at, limit, after, **filters)
        _check_limit(limit)
        names = sorted(
            hp.name
            for hp in gv.usable_profiles(at.session, at.tenant)
            if after is None or hp.name > after
        )
        page = names[:limit]
        rows = {
            r.name: r
            for r in at.session.scalars(of_kind(self.kind).where(GovernanceObject.name.in_(page)))
        }
        tenants = tenant_names(at.session)
        items = [self.shown(at, object_out(rows[n], tenants)) for n in page]
        return Page(items=items, next=page[-1] if len(names) > limit else None)


# --- local queues --------------------------------------------------------------------------


class LocalQueues:
    """A tenant's LocalQueues, in its namespace, each pointing at a ClusterQueue it may use
    (its own or the provider's unassigned ones); reading one counts its pending, admitted and
    running jobs; deleting one is refused (409) while jobs wait or run in it or a hardware
    profile sends jobs there."""

    kind = gv.LOCAL_QUEUE

    @staticmethod
    def _out(row: GovernanceObject, tenant: Tenant) -> LocalQueueOut:
        limit = (row.options or {}).get("userLimit")
        queue = str((row.document.get("spec") or {}).get("clusterQueue", ""))
        return LocalQueueOut(
            name=row.name,
            tenant=tenant.name,
            cluster_queue=shown_name(tenant, queue),
            user_limit=None if limit is None else int(limit),
            created_at=row.created_at,
            updated_at=row.updated_at,
        )

    @staticmethod
    def _body(
        session: Session, tenant: Tenant, body: LocalQueueIn
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The document and options; another tenant's ClusterQueue is answered exactly like
        a missing one (a 404 naming ``clusterQueue``, the available ones listed): a tenant
        learns nothing about others."""
        gv.check_name("clusterQueue", body.cluster_queue)
        usable = list(
            session.scalars(
                select(GovernanceObject.name)
                .where(
                    GovernanceObject.kind == gv.CLUSTER_QUEUE,
                    (GovernanceObject.tenant_id == tenant.id)
                    | GovernanceObject.tenant_id.is_(None),
                )
                .order_by(GovernanceObject.name)
            )
        )
        queue = stored_reference(session, gv.CLUSTER_QUEUE, tenant, body.cluster_queue)
        if queue not in usable:
            names = [shown_name(tenant, n) for n in usable]
            shown = ", ".join(names[:20]) + (" ..." if len(names) > 20 else "") or "none"
            raise missing(
                "clusterQueue",
                f"no ClusterQueue {body.cluster_queue!r} available to tenant {tenant.name} "
                f"(available: {shown})",
            )
        options = {} if body.user_limit is None else {"userLimit": body.user_limit}
        return {"spec": {"clusterQueue": queue}}, options

    def list(self, at: At, limit: int, after: str | None, **filters: Any) -> Page[Any]:
        assert at.tenant is not None
        rows, cursor = _page(at.session, of_kind(self.kind, at.tenant.name), limit, after)
        return Page(items=[self._out(r, at.tenant) for r in rows], next=cursor)

    def get(self, at: At, name: str) -> LocalQueueOut:
        assert at.tenant is not None
        out = self._out(gv.get_object(at.session, self.kind, name, at.tenant.name), at.tenant)
        by_state = dict(
            at.session.execute(
                select(Job.state, func.count(Job.id))
                .where(Job.tenant_id == at.tenant.id, Job.local_queue == out.name)
                .group_by(Job.state)
            ).all()
        )
        out.pending = int(by_state.get(JobState.PENDING, 0))
        out.admitted = int(by_state.get(JobState.ADMITTED, 0))
        out.running = int(by_state.get(JobState.RUNNING, 0))
        return out

    def create(self, at: At, body: LocalQueueIn) -> LocalQueueOut:
        tenant = at.tenant
        assert tenant is not None
        doc, options = self._body(at.session, tenant, body)
        name = object_name(body.name, None, label=True)
        row = create_object(at.session, self.kind, name, doc, tenant.id, tenant.name, options)
        return self._out(row, tenant)

    def update(self, at: At, name: str, body: LocalQueueIn) -> LocalQueueOut:
        tenant = at.tenant
        assert tenant is not None
        if gv.name_problem(name, label=True) is not None:  # the path names nothing that can exist
            raise not_found(f"{self.kind} {name[:100]!r}")
        object_name(body.name, name, label=True)
        row = gv.get_object(at.session, self.kind, name, tenant.name)
        doc, options = self._body(at.session, tenant, body)
        return self._out(replace_object(at.session, row, doc, tenant.id, options), tenant)

    def delete(self, at: At, name: str) -> None:
        assert at.tenant is not None
        gv.delete_object(at.session, gv.get_object(at.session, self.kind, name, at.tenant.name))


# --- priority classes ----------------------------------------------------------------------


class PriorityClasses:
    """WorkloadPriorityClasses: global ones (the provider's, read by anyone) and a tenant's
    own, in its namespace; a tenant's class hides a global one of the same name in its list
    and reads."""

    kind = gv.PRIORITY_CLASS

    @staticmethod
    def _out(row: GovernanceObject, tenant: str | None) -> PriorityClassOut:
        return PriorityClassOut(
            name=row.name,
            value=int(row.document.get("value", 0)),
            description=str(row.document.get("description") or ""),
            tenant=tenant,
            created_at=row.created_at,
            updated_at=row.updated_at,
        )

    @staticmethod
    def _body(body: PriorityClassIn) -> dict[str, Any]:
        out: dict[str, Any] = {"value": body.value}
        if body.description:
            out["description"] = body.description
        return out

    def list(self, at: At, limit: int, after: str | None, **filters: Any) -> Page[Any]:
        if at.tenant is None:
            rows, cursor = _page(at.session, of_kind(self.kind), limit, after)
            return Page(items=[self._out(r, None) for r in rows], next=cursor)
        stmt = select(GovernanceObject).where(
            GovernanceObject.kind == self.kind,
            GovernanceObject.namespace.in_(["", at.tenant.name]),
        )
        if after is not None:
            stmt = stmt.where(GovernanceObject.name > text_cursor(after))
        _check_limit(limit)
        chosen: dict[str, GovernanceObject] = {}
        for obj in at.session.scalars(stmt.order_by(GovernanceObject.name)):
            if obj.name not in chosen or obj.namespace:
                chosen[obj.name] = obj
        names = sorted(chosen)
        page = names[:limit]
        items = [
            self._out(chosen[n], at.tenant.name if chosen[n].namespace else None) for n in page
        ]
        return Page(items=items, next=page[-1] if len(names) > limit else None)

    def get(self, at: At, name: str) -> PriorityClassOut:
        if at.tenant is not None:
            own = gv.find_object(at.session, self.kind, name, at.tenant.name)
            if own is not None:
                return self._out(own, at.tenant.name)
        return self._out(gv.get_object(at.session, self.kind, name), None)

    def create(self, at: At, body: PriorityClassIn) -> PriorityClassOut:
        name = object_name(body.name, None)
        if at.tenant is None:
            row = create_object(
                at.session, self.kind, name, self._body(body), None, by_provider=True
            )
            return self._out(row, None)
        if gv.find_object(at.session, self.kind, name, at.tenant.name) is not None:
            raise conflict(
                f"WorkloadPriorityClass {name} already exists in {at.tenant.name}", "name"
            )
        doc = gv.document(self.kind, name, self._body(body))
        return self._out(gv.put_object(at.session, doc, at.tenant.id, time.time()), at.tenant.name)

    def update(self, at: At, name: str, body: PriorityClassIn) -> PriorityClassOut:
        if gv.name_problem(name) is not None:  # the path names nothing that can exist
            raise not_found(f"{self.kind} {name[:100]!r}")
        object_name(body.name, name)
        if at.tenant is None:
            row = gv.get_object(at.session, self.kind, name)
            return self._out(
                replace_object(at.session, row, self._body(body), None, by_provider=True), None
            )
        gv.get_object(at.session, self.kind, name, at.tenant.name)
        doc = gv.document(self.kind, name, self._body(body))
        return self._out(gv.put_object(at.session, doc, at.tenant.id, time.time()), at.tenant.name)

    def delete(self, at: At, name: str) -> None:
        namespace = "" if at.tenant is None else at.tenant.name
        gv.delete_object(at.session, gv.get_object(at.session, self.kind, name, namespace))
