"""The governance as Volcano queues (``scheduling.volcano.sh/v1beta1`` Queue), and back.

**Out.** Every Cohort and ClusterQueue becomes a Queue of the same name, ``spec.parent`` its
parent cohort (Volcano's hierarchical queues; a queue without a parent hangs under Volcano's
``root``, so a Kueue object named ``root`` is refused). Volcano keeps Kubernetes resource names,
so MIG instances stay ``nvidia.com/mig-<profile>`` and every resource keeps its amount:

* ``deserved``: what the subtree is guaranteed, the node's nominal quota plus its descendants'
  (summed over flavors); Volcano's capacity plugin shares out exactly this;
* ``capability``: deserved plus the borrowing limit where every flavor sets one (a resource
  with unlimited borrowing has no capability entry); a ClusterQueue without a cohort cannot
  borrow (capability = deserved); a root Cohort has no capability;
* ``guarantee.resource``: deserved minus the lending limit, where one is set: the part that is
  never lent, which is what Volcano reserves for the queue;
* ``weight``: the fair-sharing weight when set (Volcano's is a whole number from 1 to 65535;
  another weight is refused by field); ``dequeueStrategy: fifo`` for a StrictFIFO queue.

**In.** The reverse, on the one flavor the import names: a parent (of another queue in the
import, or exported as a Cohort) becomes a Cohort, the rest ClusterQueues; ``deserved`` is the
nominal quota (a parent's own quota is what its children do not take), ``capability -
deserved`` the borrowing limit, ``deserved - guarantee`` the lending limit. A queue without a
parent (or with parent ``root``) gets no cohort unless the import names one for such leaves
(``cohort``): Volcano lets top-level queues share through ``root`` (up to their capability, the
cluster when unset), and in Kueue sharing needs a cohort, so without one such a leaf must have a
capability equal to deserved. Refused by field: ``reclaimable: false`` (Kueue has no
non-reclaimable borrowing), ``priority``, ``type``, ``affinity``, ``extendClusters``, the
annotation-based hierarchy (``volcano.sh/hierarchy``: use ``spec.parent``), a capability below
deserved and a guarantee above it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuaas.model.document import mapping
from gpuaas.model.errors import InvalidValue
from gpuaas.model.resources import canonical_amount, format_amount
from gpuaas.supply.queue_tree import (
    CLUSTER_QUEUE,
    COHORT,
    ImportedQueue,
    QueueNode,
    annotations,
    queue_documents,
    with_local_queues,
)

API_VERSION = "scheduling.volcano.sh/v1beta1"
KIND = "Queue"
ROOT = "root"
MAX_WEIGHT = 65535


def _amounts(amounts: Mapping[str, int]) -> dict[str, str]:
    return {r: format_amount(r, amount) for r, amount in sorted(amounts.items())}


def volcano_queue(node: QueueNode) -> dict[str, Any]:
    """One exported Queue (see the module for the rules)."""
    where = f"{node.kind} {node.name}"
    if node.name == ROOT:
        raise InvalidValue(where, "Volcano's root queue is its own; rename the object to export")
    spec: dict[str, Any] = {}
    if node.parent:
        spec["parent"] = node.parent
    if node.subtree:
        spec["deserved"] = _amounts(node.subtree)
    if node.parent is None and node.kind == CLUSTER_QUEUE:
        if node.subtree:
            spec["capability"] = _amounts(node.subtree)  # it cannot borrow
    elif node.parent is not None:
        capability = {
            r: amount + borrowing
            for r, amount in node.subtree.items()
            if (borrowing := node.borrowing.get(r)) is not None
        }
        if capability:
            spec["capability"] = _amounts(capability)
    guarantee = {
        r: node.subtree.get(r, 0) - lending
        for r, lending in node.lending.items()
        if lending is not None
    }
    if guarantee:
        spec["guarantee"] = {"resource": _amounts({r: max(0, a) for r, a in guarantee.items()})}
    if node.weight is not None:
        if node.weight.denominator != 1 or not 1 <= node.weight <= MAX_WEIGHT:
            raise InvalidValue(
                f"{where}: fairSharing.weight",
                f"{float(node.weight)} is not a Volcano weight (a whole number 1-{MAX_WEIGHT})",
            )
        spec["weight"] = int(node.weight)
    if node.strict_fifo:
        spec["dequeueStrategy"] = "fifo"
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": node.name, "annotations": annotations(node)},
        "spec": spec,
    }


def volcano_queues(tree: Mapping[str, QueueNode]) -> list[dict[str, Any]]:
    return [volcano_queue(node) for node in tree.values()]


# --- import -------------------------------------------------------------------------------

_SPEC_FIELDS = ("parent", "deserved", "capability", "guarantee", "weight", "dequeueStrategy")


def _resource_list(value: object, where: str) -> dict[str, int]:
    return {
        str(r): canonical_amount(str(r), amount, f"{where}.{r}")  # type: ignore[arg-type]
        for r, amount in mapping(value, where).items()
    }


def read_volcano_queues(
    docs: list[Mapping[str, Any]], source: str, cohort: str | None = None
) -> list[ImportedQueue]:
    """The import's queues, checked field by field (see the module); ``cohort``: the cohort of
    the top-level leaves."""
    out: list[ImportedQueue] = []
    queues = queue_documents(
        docs,
        source,
        API_VERSION,
        _SPEC_FIELDS,
        "parent",
        "Volcano Queue",
        root=ROOT,
        defaults={"reclaimable": True},  # Volcano's default: Kueue reclaims within a cohort
    )
    for doc in queues:
        name, kind, parent, spec, where = doc.name, doc.kind, doc.parent, doc.spec, doc.where
        if kind == CLUSTER_QUEUE and parent is None:
            parent = cohort
        deserved = _resource_list(spec.get("deserved") or {}, f"{where}: spec.deserved")
        capability = _resource_list(spec.get("capability") or {}, f"{where}: spec.capability")
        guarantee_spec = mapping(spec.get("guarantee") or {}, f"{where}: spec.guarantee")
        for key in guarantee_spec:
            if key != "resource":
                raise InvalidValue(f"{where}: spec.guarantee.{key}", "has no Kueue equivalent")
        guarantee = _resource_list(
            guarantee_spec.get("resource") or {}, f"{where}: spec.guarantee.resource"
        )
        queue = ImportedQueue(name, kind, parent, dict(deserved), {}, where=where)
        for r, cap in capability.items():
            field = f"{where}: spec.capability.{r}"
            if cap < deserved.get(r, 0):
                raise InvalidValue(field, "is below deserved; Kueue cannot cap use under quota")
            if parent is None:
                if cap > deserved.get(r, 0) and kind == CLUSTER_QUEUE:
                    raise InvalidValue(
                        field,
                        "exceeds deserved but the queue has no parent to borrow from in Kueue; "
                        "import with a cohort for top-level queues (cohort=NAME)",
                    )
                continue  # a root cohort is capped by its members' quotas
            queue.quota.setdefault(r, 0)
            queue.borrowing[r] = cap - deserved.get(r, 0)
        for r in queue.quota:
            if r in capability:
                continue
            if parent is not None:
                queue.borrowing[r] = None
            elif kind == CLUSTER_QUEUE:
                raise InvalidValue(
                    f"{where}: spec.capability.{r}",
                    "is not set, so Volcano lets this top-level queue use the cluster beyond "
                    "deserved, but in Kueue a queue borrows only within a cohort: import with a "
                    "cohort for top-level queues (cohort=NAME), or set capability",
                )
        for r, kept in guarantee.items():
            field = f"{where}: spec.guarantee.resource.{r}"
            if kept > deserved.get(r, 0):
                raise InvalidValue(field, "exceeds deserved; Kueue cannot reserve beyond quota")
            queue.lending[r] = deserved.get(r, 0) - kept
        if "weight" in spec:
            weight = spec["weight"]
            if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
                raise InvalidValue(f"{where}: spec.weight", "expected a whole number from 1")
            queue.weight = weight  # type: ignore[assignment]
        strategy = spec.get("dequeueStrategy", "traverse")
        if strategy not in ("fifo", "traverse"):
            raise InvalidValue(f"{where}: spec.dequeueStrategy", "expected fifo or traverse")
        if strategy == "fifo" and kind == COHORT:
            raise InvalidValue(
                f"{where}: spec.dequeueStrategy", "a parent queue has no queueing order in Kueue"
            )
        queue.strict_fifo = strategy == "fifo"
        out.append(with_local_queues(queue, doc.meta))
    return out
