"""KAI and Volcano queues in and out of the service: the stored governance as the queues of a
cluster's own scheduler, and their queues imported as Kueue objects.

The conversions are :mod:`gpuaas.supply.kai` and :mod:`gpuaas.supply.volcano` (what maps and
what is refused, by field). An export is every Cohort and ClusterQueue, or with ``tenant`` the
tenant's ClusterQueues and the cohorts above them (so the parents they name are there). An
import converts the queues to Kueue documents on one flavor and stores them exactly as a Kueue
import does (:func:`gpuaas.service.kueue_io.import_documents`: all or none, validated with what
is stored, unchanged objects left alone); LocalQueues an export named come back in their
tenants.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.model.errors import InvalidValue
from gpuaas.service import governance as gv
from gpuaas.service.kueue_io import ImportOutcome, NamespaceMapping, import_documents
from gpuaas.store.tables import GovernanceObject, Tenant
from gpuaas.supply.kai import kai_queues, read_kai_queues
from gpuaas.supply.queue_tree import QueueNode, keep_subtrees, kueue_documents, queue_tree
from gpuaas.supply.volcano import read_volcano_queues, volcano_queues

EXPORTERS: dict[str, Callable[[Mapping[str, QueueNode]], list[dict[str, Any]]]] = {
    "kai": kai_queues,
    "volcano": volcano_queues,
}


def _tree(session: Session, tenant: str | None) -> dict[str, QueueNode]:
    gov, _ = gv.load_governance(session)
    tree = queue_tree(gov)
    if tenant is None:
        return tree
    tenant_id = session.scalar(select(Tenant.id).where(Tenant.name == tenant))
    if tenant_id is None:
        raise InvalidValue("tenant", f"no tenant {tenant!r}")
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
        if cohort is not None:
            raise InvalidValue("cohort", "only for Volcano (a KAI queue names its parent)")
        queues = read_kai_queues(list(docs), source)
    else:
        queues = read_volcano_queues(list(docs), source, cohort)
    kueue = kueue_documents(queues, flavor)
    return import_documents(session, kueue, mapping or NamespaceMapping(), dry_run)
