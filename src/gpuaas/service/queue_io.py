"""KAI and Volcano queues in and out of the service: the stored governance as the queues of a
cluster's own scheduler, and their queues imported as Kueue objects.

The conversions are :mod:`gpuaas.supply.kai` and :mod:`gpuaas.supply.volcano` (what maps and
what is refused, by field). An export is every Cohort and ClusterQueue, or with ``tenant`` the
tenant's ClusterQueues and the cohorts above them (so the parents they name are there). An
import converts the queues to Kueue documents on one flavor and stores them exactly as a Kueue
import does (:func:`gpuaas.service.kueue_io.import_documents`: all or none, validated with what
is stored, unchanged objects left alone); LocalQueues an export named come back in their
tenants. A queue that says exactly what its export says now is left as stored and reported
unchanged (so re-importing an export writes nothing, and a tenant's root cohort, which only the
tenant's terms set, is not touched).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.model.errors import InvalidValue
from gpuaas.model.resources import canonical_amount
from gpuaas.service import governance as gv
from gpuaas.service.errors import conflict, not_found
from gpuaas.service.kueue_io import ImportOutcome, NamespaceMapping, import_documents
from gpuaas.store.tables import GovernanceObject, Tenant
from gpuaas.supply.kai import kai_queues, read_kai_queues
from gpuaas.supply.queue_tree import (
    CLUSTER_QUEUE,
    COHORT,
    QueueNode,
    keep_subtrees,
    kueue_documents,
    queue_tree,
)
from gpuaas.supply.volcano import ROOT, read_volcano_queues, volcano_queues

EXPORTERS: dict[str, Callable[[Mapping[str, QueueNode]], list[dict[str, Any]]]] = {
    "kai": kai_queues,
    "volcano": volcano_queues,
}


def _tree(session: Session, tenant: str | None) -> dict[str, QueueNode]:
    gov, _ = gv.load_governance(session)
    try:
        tree = queue_tree(gov)
    except InvalidValue as exc:  # a valid request; what is stored has no form in KAI/Volcano
        raise conflict(str(exc), exc.field) from None
    if tenant is None:
        return tree
    tenant_id = session.scalar(select(Tenant.id).where(Tenant.name == tenant))
    if tenant_id is None:  # a well-formed name of no tenant: what does not exist is a 404
        raise not_found(f"tenant {tenant!r}")
    owned = session.scalars(
        select(GovernanceObject.name).where(
            GovernanceObject.kind == gv.CLUSTER_QUEUE, GovernanceObject.tenant_id == tenant_id
        )
    )
    return keep_subtrees(tree, owned)


def export_queues(session: Session, scheduler: str, tenant: str | None = None) -> str:
    """The queues of ``scheduler`` (``kai`` or ``volcano``) as multi-document YAML."""
    return yaml.safe_dump_all(EXPORTERS[scheduler](_tree(session, tenant)), sort_keys=False)


def import_queues(
    session: Session,
    scheduler: str,
    docs: list[Mapping[str, Any]],
    *,
    flavor: str | None = None,
    cohort: str | None = None,
    mapping: NamespaceMapping | None = None,
    dry_run: bool = False,
) -> ImportOutcome:
    """Store ``docs`` (KAI or Volcano Queues) as Cohorts and ClusterQueues on ``flavor``."""
    if flavor is not None:
        gv.check_name("flavor", flavor)
    if cohort is not None:
        gv.check_name("cohort", cohort)
    source = f"{scheduler} import"
    if scheduler == "kai":
        queues = read_kai_queues(list(docs), source, cohort)
    else:
        queues = read_volcano_queues(list(docs), source, cohort)
    same = _unchanged(session, scheduler, docs)
    kueue = [
        d
        for d in kueue_documents(queues, flavor)
        if not (d["kind"] in (COHORT, CLUSTER_QUEUE) and d["metadata"]["name"] in same)
    ]
    outcome = import_documents(session, kueue, mapping or NamespaceMapping(), dry_run)
    kinds = {q.name: q.kind for q in queues}
    outcome.unchanged[:0] = [f"{kinds[name]} {name}" for name in sorted(same)]
    return outcome


def _meaning(doc: Mapping[str, Any], scheduler: str) -> Any:
    """What a queue says, quantities by amount (``3Ki`` and ``3072`` CPUs are one)."""
    spec = dict(doc.get("spec") or {})
    if scheduler == "volcano":
        for key in ("deserved", "capability"):
            if isinstance(spec.get(key), Mapping):
                spec[key] = _amounts(spec[key])
        guarantee = spec.get("guarantee")
        if isinstance(guarantee, Mapping) and isinstance(guarantee.get("resource"), Mapping):
            spec["guarantee"] = {**guarantee, "resource": _amounts(guarantee["resource"])}
        if spec.get("reclaimable") is True:  # Volcano's default
            spec.pop("reclaimable")
        if spec.get("parent") == ROOT:
            spec.pop("parent")
    notes = (doc.get("metadata") or {}).get("annotations") or {}
    return spec, {k: v for k, v in notes.items() if k.startswith("gpuaas.io/")}


def _amounts(values: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return {str(r): canonical_amount(str(r), v) for r, v in values.items()}
    except (InvalidValue, TypeError):
        return dict(values)  # not comparable: the import names the field


def _unchanged(session: Session, scheduler: str, docs: list[Mapping[str, Any]]) -> set[str]:
    """Queues that say exactly what their export says now: left as stored (re-importing an
    export writes nothing, and a tenant's root cohort, which only its terms set, is not
    touched). A parent whose children in the import changed is not among them: its own quota
    is what they leave of it."""
    try:
        current = {
            d["metadata"]["name"]: _meaning(d, scheduler)
            for d in EXPORTERS[scheduler](_tree(session, None))
        }
    except InvalidValue:
        return set()  # the stored governance has no export to compare with
    same: set[str] = set()
    changed_parents: set[str] = set()
    for doc in docs:
        meta = doc.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        if not isinstance(name, str):
            continue
        if name in current and current[name] == _meaning(doc, scheduler):
            same.add(name)
        else:
            spec = doc.get("spec")
            if isinstance(spec, Mapping):
                changed_parents.add(str(spec.get("parentQueue") or spec.get("parent") or ""))
    return same - changed_parents
