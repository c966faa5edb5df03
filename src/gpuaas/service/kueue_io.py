"""Kueue YAML in and out of the service: namespaces mapped to tenants, re-imports that change
nothing reported as unchanged, exports as written.

**Namespaces.** In Kueue a LocalQueue lives in a Kubernetes namespace; in gpuaas it belongs to a
tenant, and the tenant's name is its namespace. An import says how the file's namespaces map to
tenants: by default each namespace is the tenant of the same name (so an export re-imports as it
is); ``namespaceMap`` entries ``namespace=tenant`` send named namespaces elsewhere, and
``tenant`` sends every namespace the map does not name to one tenant. A LocalQueue whose
namespace maps to no existing tenant is a 422 naming the object and both ways to map it. The
LocalQueue is stored, and exported, in its tenant's namespace.

**Unchanged.** An object whose stored document means the same as the imported one (equal once
loaded: ``cpu: 3072`` and ``cpu: 3Ki`` are one quota) is reported ``unchanged`` and left as it
was stored, so exporting and importing again is a no-op: nothing written, no version bump.

**As written.** The export is the stored documents themselves (v1beta2: older versions are
converted on import), in kind order, so quantities keep the form they were written in rather
than being re-rendered from canonical amounts.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.model.errors import InvalidValue
from gpuaas.service import governance as gv
from gpuaas.service.errors import invalid
from gpuaas.store.tables import Tenant
from gpuaas.supply.kueue import check_object, same_object

SOURCE = "import"
#: Export order: what an object refers to comes before it.
EXPORT_ORDER = (
    "Topology",
    gv.FLAVOR,
    gv.COHORT,
    gv.CLUSTER_QUEUE,
    gv.LOCAL_QUEUE,
    gv.PRIORITY_CLASS,
    gv.HARDWARE_PROFILE,
)


@dataclass(frozen=True)
class NamespaceMapping:
    """Which tenant each LocalQueue namespace of an import belongs to (see the module)."""

    namespaces: Mapping[str, str] = field(default_factory=dict)
    tenant: str | None = None

    @classmethod
    def parse(cls, entries: Sequence[str], tenant: str | None) -> NamespaceMapping:
        """``entries`` are ``namespace=tenant`` (several per entry, separated by commas)."""
        namespaces: dict[str, str] = {}
        for entry in entries:
            for item in (part.strip() for part in entry.split(",")):
                if not item:
                    continue
                namespace, sep, target = (s.strip() for s in item.partition("="))
                if not sep or not namespace or not target:
                    raise invalid(
                        "namespaceMap", f"{item!r} is not namespace=tenant (e.g. default=acme-ai)"
                    )
                if namespaces.get(namespace, target) != target:
                    raise invalid(
                        "namespaceMap",
                        f"namespace {namespace!r} is mapped twice ({namespaces[namespace]!r} "
                        f"and {target!r})",
                    )
                namespaces[namespace] = gv.check_name("namespaceMap", target, label=True)
        if tenant is not None:
            gv.check_name("tenant", tenant, label=True)
        return cls(namespaces, tenant)

    def tenant_of(self, namespace: str) -> str:
        return self.namespaces.get(namespace) or self.tenant or namespace

    def how(self, namespace: str) -> str:
        """Why ``namespace`` maps where it does, for an error."""
        if namespace in self.namespaces:
            return f"namespaceMap sends namespace {namespace!r} to it"
        if self.tenant is not None:
            return "the import's tenant option sends every namespace to it"
        return "by default a namespace is the tenant of the same name"


@dataclass
class ImportOutcome:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)


def import_documents(
    session: Session, docs: list[Mapping[str, Any]], mapping: NamespaceMapping, dry_run: bool
) -> ImportOutcome:
    """Convert, map and compare every document, then store the changed ones together (all or
    none, validated with what is stored)."""
    outcome = ImportOutcome()
    changes = []
    tenants = {name for (name,) in session.execute(select(Tenant.name))}
    seen: set[tuple[str, str, str]] = set()
    for index, raw in enumerate(docs):
        # each object's own fields first, as the loader checks them (a Job, an AdmissionCheck or
        # an unsupported field is named as what it is), then its key (names are looked up)
        doc = check_object(raw, index, SOURCE)
        kind, namespace, name = gv.check_key(doc)
        if kind == gv.LOCAL_QUEUE:
            namespace = _map_namespace(doc, namespace, name, mapping, tenants)
        label = f"{kind} {namespace + '/' if namespace else ''}{name}"
        if (kind, namespace, name) in seen:  # also when both copies would be unchanged
            raise InvalidValue(f"{SOURCE}: {label}", "defined twice")
        seen.add((kind, namespace, name))
        existing = gv.find_object(session, kind, name, namespace)
        if existing is not None and same_object(existing.document, doc):
            outcome.unchanged.append(label)
            continue
        (outcome.updated if existing is not None else outcome.created).append(label)
        owner = None if existing is None else existing.tenant_id
        changes.append((doc, owner, None))
    if changes:
        # the import route is the provider's (require_platform): its writes have the provider's
        # authority, and the tenancy rules still hold for what lands in a tenant's tree
        gv.put_objects(
            session, changes, time.time(), source=SOURCE, write=not dry_run, by_provider=True
        )
    return outcome


def _map_namespace(
    doc: dict[str, Any],
    namespace: str,
    name: str,
    mapping: NamespaceMapping,
    tenants: set[str],
) -> str:
    """The tenant ``namespace`` maps to (written into ``doc``), or a 422 saying how to map it."""
    tenant = mapping.tenant_of(namespace)
    if tenant not in tenants:
        field_ = f"{SOURCE}: LocalQueue {namespace}/{name}: metadata.namespace"
        raise InvalidValue(
            field_,
            f"namespace {namespace!r} maps to tenant {tenant!r}, which does not exist "
            f"({mapping.how(namespace)}); map it to a tenant with namespaceMap="
            f"{namespace}=<tenant> (CLI: --namespace-map {namespace}=<tenant>), or send every "
            "namespace to one tenant with tenant=<tenant> (CLI: --tenant <tenant>)",
        )
    doc["metadata"] = {**doc["metadata"], "namespace": tenant}
    return tenant


def export_documents(session: Session) -> list[dict[str, Any]]:
    """Every shared stored object as stored (tenants' own priority classes are left out)."""
    rows = [
        r  # the shared configuration, as gv.load_governance reads it
        for r in gv.all_objects(session)
        if not (r.kind == gv.PRIORITY_CLASS and r.namespace)
    ]
    rank = {kind: i for i, kind in enumerate(EXPORT_ORDER)}
    rows.sort(key=lambda r: (rank.get(r.kind, len(rank)), r.id))
    return [r.document for r in rows]


def export_yaml(session: Session) -> str:
    return yaml.safe_dump_all(export_documents(session), sort_keys=False)
