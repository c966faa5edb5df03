"""The governance as KAI scheduler queues (``scheduling.run.ai/v2`` Queue), and back.

**Out.** Every Cohort and ClusterQueue becomes a Queue of the same name whose ``parentQueue``
is its parent cohort (KAI: only leaves run jobs, parents divide their share among children,
as Kueue's cohorts lend to their members). KAI counts three resources, without flavors:

* ``quota`` is what the subtree is guaranteed: the node's nominal quota plus its descendants',
  summed over flavors;
* ``limit`` is the quota plus the borrowing limit (summed over flavors), ``-1`` (no limit) when
  any flavor leaves borrowing unlimited; a ClusterQueue without a cohort cannot borrow
  (``limit`` = ``quota``), a root Cohort has no limit of its own (``-1``); a resource the
  subtree does not cover at all has quota 0 and limit 0;
* ``overQuotaWeight`` is the Kueue fair-sharing weight (1 when unset), the same for every
  resource, since Kueue has one weight per queue.

Units are KAI's: ``cpu`` in millicores, ``memory`` in megabytes (10^6 bytes), ``gpu`` in GPUs.
A MIG instance counts as KAI counts it when it sums a pod's GPUs (``GetGpusQuota``): an
``nvidia.com/mig-<g>g.<m>gb`` instance is ``g`` GPUs, so 7 x ``mig-1g.10gb`` is 7; profiles
KAI's pattern does not read (``+me``) are refused, as is anything with no KAI resource
(``nvidia.com/gpu.shared``, other extended resources) and Kueue's ``lendingLimit``, which KAI
has no field for. ``gpuaas.io/gpu-milli`` counts as fractions of a GPU.

**In.** A Queue that is the parent of another in the import, or was exported as a Cohort
(annotation ``gpuaas.io/kueue-kind``), becomes a Cohort; the others ClusterQueues in the cohort
their ``parentQueue`` names, on the one flavor the import names. ``quota`` is the nominal quota
(a parent's own quota is what its children in the import do not take), ``limit - quota`` the
borrowing limit (``-1``: unlimited; ``0`` or unset: no borrowing, as KAI's docs define),
``overQuotaWeight`` the fair-sharing weight. KAI lets top-level queues share the cluster over
their quota; in Kueue that needs a cohort, which the import names for top-level leaves
(``cohort``); without one, a top-level leaf whose limit exceeds its quota is refused. What KAI
says that Kueue cannot is refused naming the field, never dropped: an unlimited quota
(``-1``), a fraction of a GPU or of a millicore, different weights per resource,
``priority``, ``displayName`` and the minimum runtimes. KAI's
``gpu`` comes back as ``nvidia.com/gpu``: MIG instances folded into it on export do not return.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from gpuaas.model.document import mapping
from gpuaas.model.errors import InvalidValue
from gpuaas.model.resources import CPU, GPU_MILLI, MEMORY, MIG_PREFIX, NVIDIA_GPU
from gpuaas.supply.queue_tree import (
    CLUSTER_QUEUE,
    COHORT,
    ImportedQueue,
    QueueNode,
    annotations,
    number,
    queue_documents,
    with_local_queues,
)

API_VERSION = "scheduling.run.ai/v2"
KIND = "Queue"
RESOURCES = ("gpu", "cpu", "memory")
_MIG = re.compile(r"^nvidia\.com/mig-(\d+)g\.(\d+)gb$")  # KAI's own pattern
_MB = 10**6
UNLIMITED = -1


def kai_resource(resource: str, amount: int, where: str) -> tuple[str, Fraction]:
    """(KAI resource, amount in KAI's unit) of a canonical gpuaas amount."""
    if resource == CPU:
        return "cpu", Fraction(amount)
    if resource == MEMORY:
        return "memory", Fraction(amount, _MB)
    if resource == NVIDIA_GPU:
        return "gpu", Fraction(amount)
    if resource == GPU_MILLI:
        return "gpu", Fraction(amount, 1000)
    if resource.startswith(MIG_PREFIX):
        match = _MIG.fullmatch(resource)
        if match is None:
            raise InvalidValue(
                f"{where}: {resource}",
                "KAI does not count this MIG profile in GPU quota (it reads "
                "nvidia.com/mig-<g>g.<m>gb only), so it cannot be exported",
            )
        return "gpu", Fraction(int(match[1]) * amount)
    raise InvalidValue(
        f"{where}: {resource}", "has no KAI queue resource (KAI queues count gpu, cpu and memory)"
    )


def _json_number(value: Fraction) -> int | float:
    return value.numerator if value.denominator == 1 else float(value)


def kai_queue(node: QueueNode) -> dict[str, Any]:
    """One exported Queue (see the module for the rules)."""
    where = f"{node.kind} {node.name}"
    for r, lending in node.lending.items():
        if lending is not None:
            raise InvalidValue(
                f"{where}: lendingLimit of {r}", "has no KAI equivalent (KAI queues only cap use)"
            )
    quota = {name: Fraction(0) for name in RESOURCES}
    limit: dict[str, Fraction | None] = {name: Fraction(0) for name in RESOURCES}
    covered: set[str] = set()
    for r, amount in node.subtree.items():
        name, value = kai_resource(r, amount, where)
        quota[name] += value
        covered.add(name)
    for name in covered:
        limit[name] = quota[name]
    if node.parent is None:
        if node.kind == COHORT:
            limit = {name: None for name in RESOURCES}
    else:
        for r in node.subtree:
            name, _ = kai_resource(r, 0, where)
            borrowing = node.borrowing.get(r)
            current = limit[name]
            if borrowing is None or current is None:
                limit[name] = None
            else:
                limit[name] = current + kai_resource(r, borrowing, where)[1]
    weight = float(node.weight) if node.weight is not None else 1
    resources = {
        name: {
            "quota": _json_number(quota[name]),
            "limit": UNLIMITED if limit[name] is None else _json_number(limit[name]),  # type: ignore[arg-type]
            "overQuotaWeight": int(weight) if float(weight).is_integer() else weight,
        }
        for name in RESOURCES
    }
    spec: dict[str, Any] = {}
    if node.parent:
        spec["parentQueue"] = node.parent
    spec["resources"] = resources
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": node.name, "annotations": annotations(node)},
        "spec": spec,
    }


def kai_queues(tree: Mapping[str, QueueNode]) -> list[dict[str, Any]]:
    return [kai_queue(node) for node in tree.values()]


# --- import -------------------------------------------------------------------------------

_SPEC_FIELDS = ("parentQueue", "resources")
_RESOURCE_FIELDS = ("quota", "limit", "overQuotaWeight")


def _canonical(name: str, value: Fraction, where: str) -> tuple[str, int]:
    if name == "cpu":
        resource, amount = CPU, value
        unit = "a millicore"
    elif name == "memory":
        resource, amount = MEMORY, value * _MB
        unit = "a byte"
    else:
        resource, amount = NVIDIA_GPU, value
        unit = "a GPU (gpuaas quotas count whole GPUs)"
    if amount.denominator != 1:
        raise InvalidValue(where, f"{float(value)} is a fraction of {unit}; no Kueue equivalent")
    return resource, amount.numerator


def read_kai_queues(
    docs: list[Mapping[str, Any]], source: str, cohort: str | None = None
) -> list[ImportedQueue]:
    """The import's queues, checked field by field (see the module); ``cohort``: the cohort of
    the top-level leaves."""
    out: list[ImportedQueue] = []
    for doc in queue_documents(docs, source, API_VERSION, _SPEC_FIELDS, "parentQueue", "KAI Queue"):
        name, kind, parent, spec, where = doc.name, doc.kind, doc.parent, doc.spec, doc.where
        if kind == CLUSTER_QUEUE and parent is None:
            parent = cohort
        queue = ImportedQueue(name, kind, parent, {}, {}, where=where)
        weights: dict[str, Fraction] = {}
        resources = mapping(spec.get("resources"), f"{where}: spec.resources")
        for rname, body in resources.items():
            field = f"{where}: spec.resources.{rname}"
            if rname not in RESOURCES:
                raise InvalidValue(field, "has no Kueue equivalent (KAI counts gpu, cpu, memory)")
            body = mapping(body, field)
            for key in body:
                if key not in _RESOURCE_FIELDS:
                    raise InvalidValue(f"{field}.{key}", "has no Kueue equivalent")
            quota = number(body.get("quota", 0), f"{field}.quota")
            if quota == UNLIMITED:
                raise InvalidValue(
                    f"{field}.quota",
                    "-1 (unlimited) has no Kueue equivalent: a Kueue nominal quota is an amount",
                )
            if quota < 0:
                raise InvalidValue(f"{field}.quota", f"must be at least 0, got {float(quota)}")
            resource, nominal = _canonical(rname, quota, f"{field}.quota")
            queue.quota[resource] = nominal
            limit = number(body.get("limit", 0), f"{field}.limit")
            borrowing: int | None
            if limit == UNLIMITED:
                borrowing = None
            elif limit == 0:
                borrowing = 0  # KAI: no resources beyond the quota
            elif limit < quota:
                raise InvalidValue(
                    f"{field}.limit",
                    f"{float(limit)} is below the quota {float(quota)}; Kueue cannot cap use "
                    "under the nominal quota",
                )
            else:
                borrowing = _canonical(rname, limit - quota, f"{field}.limit")[1]
            if parent is not None:
                queue.borrowing[resource] = borrowing
            elif kind == CLUSTER_QUEUE and borrowing != 0:
                raise InvalidValue(
                    f"{field}.limit",
                    "lets a top-level queue use more than its quota (KAI shares the cluster "
                    "between top-level queues), but in Kueue a queue borrows only within a "
                    "cohort: import with a cohort for top-level queues (cohort=NAME)",
                )
            # a root cohort borrows from nobody: its limit caps nothing its members' quota does not
            if "overQuotaWeight" in body:
                weights[rname] = number(body["overQuotaWeight"], f"{field}.overQuotaWeight")
        distinct = sorted(set(weights.values()))
        if len(distinct) > 1:
            first = next(r for r, w in weights.items() if w != weights[next(iter(weights))])
            raise InvalidValue(
                f"{where}: spec.resources.{first}.overQuotaWeight",
                "differs from the other resources' weights; Kueue has one fairSharing.weight "
                "per queue, so per-resource weights have no Kueue equivalent",
            )
        if distinct:
            if distinct[0] < 0:
                raise InvalidValue(
                    f"{where}: spec.resources.{next(iter(weights))}.overQuotaWeight",
                    "must be at least 0",
                )
            queue.weight = distinct[0]
        out.append(with_local_queues(queue, doc.meta))
    return out
