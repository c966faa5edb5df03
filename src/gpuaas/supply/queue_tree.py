"""The governance as one tree of queues, the shape KAI and Volcano queues take.

Kueue splits what a scheduler queue is into ClusterQueues (leaves that admit work) and Cohorts
(inner nodes that lend and borrow), each with quota per *flavor*. KAI's ``scheduling.run.ai/v2``
Queue and Volcano's ``scheduling.volcano.sh/v1beta1`` Queue are one kind for both roles, linked
by a parent name, with one amount per *resource* and no flavors. :func:`queue_tree` gives each
Cohort and ClusterQueue a :class:`QueueNode` holding what the two exports need:

* ``nominal``: the node's own nominal quota per resource, summed over its flavors;
* ``borrowing`` / ``lending``: summed limits per resource, ``None`` when any flavor leaves the
  resource unlimited (Kueue's nil);
* ``subtree``: own nominal plus every descendant's, which is what the node guarantees its
  subtree in Kueue and what a parent queue's quota (KAI) or deserved share (Volcano) means.

Both schedulers keep every queue in one cluster-wide name space, so a Cohort and a ClusterQueue
of the same name cannot both be exported; that is refused, naming both. The reverse direction
(:func:`kueue_documents`) builds Cohort and ClusterQueue documents from per-resource amounts on
one flavor, which is all a flavor-less queue can say.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from gpuaas.model.document import mapping
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import Governance, QueueingStrategy, ResourceGroup
from gpuaas.model.resources import format_amount
from gpuaas.supply.kueue import API_VERSION as KUEUE_API_VERSION

COHORT = "Cohort"
CLUSTER_QUEUE = "ClusterQueue"
#: Annotations the exports write and the imports read back: which Kueue kind a queue was
#: (a parent queue with no children in the file is still a Cohort), and the LocalQueues
#: (``namespace/name``) that feed a leaf.
KIND_ANNOTATION = "gpuaas.io/kueue-kind"
LOCAL_QUEUES_ANNOTATION = "gpuaas.io/local-queues"
FLAVORS_ANNOTATION = "gpuaas.io/flavors"
#: Metadata an import accepts besides name: what the API server sets, and kubectl's copy.
SERVER_METADATA = frozenset(
    {"uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink"}
)
IGNORED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration"})


@dataclass
class QueueNode:
    name: str
    kind: str  # COHORT or CLUSTER_QUEUE
    parent: str | None
    nominal: dict[str, int] = field(default_factory=dict)
    borrowing: dict[str, int | None] = field(default_factory=dict)
    lending: dict[str, int | None] = field(default_factory=dict)
    weight: Fraction | None = None
    flavors: tuple[str, ...] = ()
    strict_fifo: bool = False
    children: list[str] = field(default_factory=list)
    subtree: dict[str, int] = field(default_factory=dict)
    local_queues: list[str] = field(default_factory=list)


def _sums(groups: tuple[ResourceGroup, ...], node: QueueNode) -> None:
    flavors: list[str] = []
    for group in groups:
        for flavor in group.flavors:
            if flavor.name not in flavors:
                flavors.append(flavor.name)
            for quota in flavor.resources:
                r = quota.name
                node.nominal[r] = node.nominal.get(r, 0) + quota.nominal
                for limits, value in (
                    (node.borrowing, quota.borrowing_limit),
                    (node.lending, quota.lending_limit),
                ):
                    before = limits.get(r, 0)
                    limits[r] = None if before is None or value is None else before + value
    node.flavors = tuple(flavors)


def queue_tree(gov: Governance) -> dict[str, QueueNode]:
    """Every Cohort (explicit or only named) and ClusterQueue as a node, parents first."""
    nodes: dict[str, QueueNode] = {}
    for name in sorted(gov.cohort_names()):
        cohort = gov.cohorts.get(name)
        node = QueueNode(name, COHORT, cohort.parent if cohort else None)
        if cohort is not None:
            _sums(cohort.resource_groups, node)
            node.weight = cohort.fair_sharing_weight
        nodes[name] = node
    for name, cq in sorted(gov.cluster_queues.items()):
        if name in nodes:
            raise InvalidValue(
                f"ClusterQueue {name}",
                f"a Cohort is named {name!r} too; a KAI or Volcano queue name is one name "
                "space for both, so rename one of them before exporting",
            )
        node = QueueNode(name, CLUSTER_QUEUE, cq.cohort)
        _sums(cq.resource_groups, node)
        node.weight = cq.fair_sharing_weight
        node.strict_fifo = cq.queueing_strategy == QueueingStrategy.STRICT_FIFO
        nodes[name] = node
    for lq in gov.local_queues.values():
        if lq.cluster_queue in nodes:
            nodes[lq.cluster_queue].local_queues.append(f"{lq.namespace}/{lq.name}")
    for node in nodes.values():
        if node.parent is not None and node.parent in nodes:
            nodes[node.parent].children.append(node.name)

    def subtree(name: str) -> dict[str, int]:
        node = nodes[name]
        if not node.subtree:
            total = dict(node.nominal)
            for child in node.children:
                for r, amount in subtree(child).items():
                    total[r] = total.get(r, 0) + amount
            node.subtree = total
        return node.subtree

    ordered: dict[str, QueueNode] = {}

    def visit(name: str) -> None:
        if name in ordered:
            return
        parent = nodes[name].parent
        if parent is not None and parent in nodes:
            visit(parent)
        subtree(name)
        ordered[name] = nodes[name]

    for name in nodes:
        visit(name)
    return ordered


def keep_subtrees(tree: dict[str, QueueNode], leaves: Iterable[str]) -> dict[str, QueueNode]:
    """The nodes on the paths from the root to ``leaves`` and below them (a tenant's queues)."""
    wanted: set[str] = set()
    for name in leaves:
        at: str | None = name
        while at is not None and at in tree and at not in wanted:
            wanted.add(at)
            at = tree[at].parent
    return {name: node for name, node in tree.items() if name in wanted}


def annotations(node: QueueNode) -> dict[str, str]:
    out = {KIND_ANNOTATION: node.kind}
    if node.flavors:
        out[FLAVORS_ANNOTATION] = ",".join(node.flavors)
    if node.local_queues:
        out[LOCAL_QUEUES_ANNOTATION] = ",".join(sorted(node.local_queues))
    return out


def check_metadata(meta: Mapping[str, Any], where: str, scheduler: str) -> tuple[str, str | None]:
    """(name, the Kueue kind annotated or None); refuses metadata that would mean something."""
    for key in meta:
        if key not in {"name", "annotations", "labels"} | SERVER_METADATA:
            raise InvalidValue(f"{where}.metadata.{key}", f"has no Kueue equivalent ({scheduler})")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidValue(f"{where}.metadata.name", "is required")
    labels = meta.get("labels") or {}
    if labels:
        first = next(iter(labels))
        raise InvalidValue(
            f"{where}.metadata.labels.{first}",
            "labels on a queue have no Kueue equivalent; remove them before importing",
        )
    kind = None
    for key, value in (meta.get("annotations") or {}).items():
        if key in IGNORED_ANNOTATIONS or key in (FLAVORS_ANNOTATION, LOCAL_QUEUES_ANNOTATION):
            continue
        if key == KIND_ANNOTATION and value in (COHORT, CLUSTER_QUEUE):
            kind = value
            continue
        raise InvalidValue(
            f"{where}.metadata.annotations.{key}", f"has no Kueue equivalent ({scheduler})"
        )
    return name, kind


def local_queue_documents(meta: Mapping[str, Any], cluster_queue: str, where: str) -> list[dict]:
    """The LocalQueues an exported leaf named in its annotation, to re-create on import."""
    text = (meta.get("annotations") or {}).get(LOCAL_QUEUES_ANNOTATION, "")
    out = []
    for item in filter(None, (s.strip() for s in str(text).split(","))):
        namespace, sep, name = item.partition("/")
        if not sep or not namespace or not name:
            raise InvalidValue(
                f"{where}.metadata.annotations.{LOCAL_QUEUES_ANNOTATION}",
                f"{item!r} is not namespace/name",
            )
        out.append(
            {
                "apiVersion": KUEUE_API_VERSION,
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"clusterQueue": cluster_queue},
            }
        )
    return out


@dataclass(frozen=True)
class QueueDocument:
    """One scheduler Queue of an import, its shape checked: the Kueue kind it becomes (a parent
    of another queue in the import, or exported as one, is a Cohort)."""

    name: str
    kind: str
    parent: str | None
    spec: Mapping[str, Any]
    meta: Mapping[str, Any]
    where: str


def queue_documents(
    docs: list[Mapping[str, Any]],
    source: str,
    api_version: str,
    spec_fields: Iterable[str],
    parent_field: str,
    scheduler: str,
    *,
    root: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> list[QueueDocument]:
    """The Queues of an import (``api_version``; ``scheduler`` names them in errors), every
    field not in ``spec_fields`` refused by name; a spec field at its value in ``defaults`` says
    nothing and is allowed; ``root``: the scheduler's implicit root queue, which a parent may
    name (= no parent) and a queue may not be."""
    allowed = set(spec_fields)
    read: list[tuple[str, str | None, str | None, Mapping[str, Any], Mapping[str, Any], str]] = []
    for index, doc in enumerate(docs):
        where = f"{source}[{index}]"
        if doc.get("apiVersion") != api_version or doc.get("kind") != "Queue":
            raise InvalidValue(
                f"{where}.kind",
                f"expected {api_version} Queue, got {doc.get('apiVersion')} {doc.get('kind')}",
            )
        for key in doc:
            if key not in ("apiVersion", "kind", "metadata", "spec", "status"):
                raise InvalidValue(f"{where}.{key}", f"has no Kueue equivalent ({scheduler})")
        meta = mapping(doc.get("metadata"), f"{where}.metadata")
        name, kind = check_metadata(meta, where, scheduler)
        where = f"{source}: Queue {name}"
        if root is not None and name == root:
            raise InvalidValue(
                f"{where}: metadata.name", "the root queue is implicit; leave it out"
            )
        spec = mapping(doc.get("spec"), f"{where}: spec")
        for key, value in spec.items():
            if key in allowed or (defaults is not None and defaults.get(key, ...) == value):
                continue
            said = f"{key}: {str(value).lower()}" if isinstance(value, bool) else key
            raise InvalidValue(f"{where}: spec.{key}", f"{said} has no Kueue equivalent")
        parent = spec.get(parent_field) or None
        if parent is not None and not isinstance(parent, str):
            raise InvalidValue(f"{where}: spec.{parent_field}", "expected a queue name")
        read.append((name, kind, None if parent == root else parent, spec, meta, where))
    parents = {parent for _, _, parent, _, _, _ in read if parent}
    out = []
    for name, kind, parent, spec, meta, where in read:
        kind = kind or (COHORT if name in parents else CLUSTER_QUEUE)
        if kind == CLUSTER_QUEUE and name in parents:
            raise InvalidValue(
                f"{where}: metadata.annotations", "a queue with children must be a Cohort"
            )
        out.append(QueueDocument(name, kind, parent, spec, meta, where))
    return out


def with_local_queues(queue: ImportedQueue, meta: Mapping[str, Any]) -> ImportedQueue:
    """``queue`` with the LocalQueues its export annotated (a Cohort has none in Kueue)."""
    local = local_queue_documents(meta, queue.name, queue.where)
    if local and queue.kind == COHORT:
        raise InvalidValue(
            f"{queue.where}: metadata.annotations", "a Cohort has no LocalQueues in Kueue"
        )
    queue.local_queues = local
    return queue


@dataclass
class ImportedQueue:
    """One scheduler queue read for import: per-resource canonical amounts."""

    name: str
    kind: str
    parent: str | None
    quota: dict[str, int]
    borrowing: dict[str, int | None]  # absent: unlimited; value: the borrowing limit
    lending: dict[str, int] = field(default_factory=dict)
    weight: Fraction | None = None
    strict_fifo: bool = False
    where: str = ""
    local_queues: list[dict[str, Any]] = field(default_factory=list)


def kueue_documents(queues: list[ImportedQueue], flavor: str | None) -> list[dict[str, Any]]:
    """Cohorts and ClusterQueues (and annotated LocalQueues) for ``queues`` on one flavor
    (needed as soon as one queue has an amount: a KAI or Volcano queue has no flavors).

    A parent's quota covers its children's (KAI's quota and Volcano's deserved are what the
    subtree is guaranteed), so a Cohort's own nominal quota is what is left after its children
    in the same import; a parent smaller than its children is refused by field."""
    by_name = {q.name: q for q in queues}
    children: dict[str, list[ImportedQueue]] = {}
    for q in queues:
        if q.parent is not None and q.parent in by_name:
            children.setdefault(q.parent, []).append(q)
    docs: list[dict[str, Any]] = []
    for q in queues:
        own = dict(q.quota)
        for child in children.get(q.name, []):
            for r, amount in child.quota.items():
                own[r] = own.get(r, 0) - amount
                if own[r] < 0:
                    raise InvalidValue(
                        f"{q.where}: {r}",
                        f"the children's quotas ({', '.join(c.name for c in children[q.name])}) "
                        f"exceed the parent's by {format_amount(r, -own[r])}; Kueue cannot lend "
                        "a cohort more than it has",
                    )
        resources = sorted(
            r for r in set(own) | set(q.borrowing) | set(q.lending) if _says(q, r, own)
        )
        quotas = []
        for r in resources:
            entry: dict[str, Any] = {"name": r, "nominalQuota": format_amount(r, own.get(r, 0))}
            if q.borrowing.get(r) is not None:
                entry["borrowingLimit"] = format_amount(r, q.borrowing[r] or 0)
            if r in q.lending:
                entry["lendingLimit"] = format_amount(r, q.lending[r])
            quotas.append(entry)
        spec: dict[str, Any] = {}
        if q.kind == COHORT:
            if q.parent:
                spec["parentName"] = q.parent
        else:
            if q.parent:
                spec["cohortName"] = q.parent
            spec["queueingStrategy"] = "StrictFIFO" if q.strict_fifo else "BestEffortFIFO"
            spec["preemption"] = {
                "withinClusterQueue": "LowerPriority",
                "reclaimWithinCohort": "Any",
            }
        if quotas and not flavor:
            raise InvalidValue(
                "flavor",
                f"is required ({q.where} has quota): a KAI or Volcano queue has no flavors, "
                "so name the ResourceFlavor its quota is on",
            )
        if quotas:
            spec["resourceGroups"] = [
                {"coveredResources": resources, "flavors": [{"name": flavor, "resources": quotas}]}
            ]
        if q.weight is not None and q.weight != 1:
            spec["fairSharing"] = {"weight": str(_decimal(q.weight))}
        docs.append(
            {
                "apiVersion": KUEUE_API_VERSION,
                "kind": q.kind,
                "metadata": {"name": q.name},
                "spec": spec,
            }
        )
    for q in queues:
        docs.extend(q.local_queues)
    return docs


def _says(q: ImportedQueue, r: str, own: Mapping[str, int]) -> bool:
    """Whether resource ``r`` needs an entry: one with nothing to give or take says nothing (a
    cohort with no quota and unlimited borrowing of it is a cohort that does not list it; a
    queue with no quota that may not borrow it is a queue that does not cover it)."""
    if own.get(r, 0) or r in q.lending:
        return True
    if q.kind == COHORT:
        return q.borrowing.get(r) is not None
    return r in q.borrowing and q.borrowing[r] != 0


def _decimal(weight: Fraction) -> str:
    if weight.denominator == 1:
        return str(weight.numerator)
    return str(float(weight))


def number(value: object, where: str) -> Fraction:
    """A JSON number (KAI's quota fields) as an exact fraction."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidValue(where, f"expected a number, got {value!r}")
    return Fraction(str(value)) if isinstance(value, float) else Fraction(value)
