"""Import and export Kueue ``kueue.x-k8s.io/v1beta2`` objects.

A platform engineer brings their Kueue configuration unchanged. Every field we understand is
mapped; every field we do not is rejected by name (never dropped silently), so that a
configuration never means something different here than in Kueue. Server-populated metadata and
``status`` are runtime output, not configuration, and are ignored. Objects of the older versions
(``v1beta1``, ``v1alpha1`` Topology and Cohort) are converted first, as Kueue's conversion
webhook does (:mod:`gpuaas.supply.kueue_conversion`).

A ``Topology`` names the levels of the network, outermost first, by node label. Each label must
be one gpuaas knows a level by: the level's own label (:class:`gpuaas.model.topology.Level`) or a
cloud label the Kubernetes node loader reads for it (``cloud.google.com/gce-topology-block`` is
a block, ``topology.k8s.aws/network-node-layer-3`` a rack); a label gpuaas would not find on
its nodes is refused, listing the known ones.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from gpuaas.model.document import integer, mapping, only, sequence, text
from gpuaas.model.errors import GpuaasError, InvalidValue
from gpuaas.model.governance import (
    BorrowWithinCohortPolicy,
    ClusterQueue,
    Cohort,
    FlavorFungibility,
    FlavorQuotas,
    FungibilityPolicy,
    FungibilityPreference,
    Governance,
    HardwareProfile,
    LocalQueue,
    NamedTopology,
    PreemptionPolicy,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    ResourceRange,
    WithinClusterQueue,
    WorkloadPriorityClass,
)
from gpuaas.model.node import Taint, TaintEffect, Toleration
from gpuaas.model.quantity import Quantity
from gpuaas.model.resources import canonical_amount, check_resource_name, format_amount
from gpuaas.model.topology import LEVELS, Level
from gpuaas.supply.kueue_conversion import V1ALPHA1, V1BETA1, as_written, to_v1beta2
from gpuaas.supply.loaders.kubernetes import TOPOLOGY_LABELS

API_VERSION = "kueue.x-k8s.io/v1beta2"
KINDS = (
    "ResourceFlavor",
    "ClusterQueue",
    "Cohort",
    "LocalQueue",
    "WorkloadPriorityClass",
    "Topology",
)
#: Kinds of the kueue.x-k8s.io group that gpuaas has no meaning for (refused by kind, saying so).
UNSUPPORTED_KUEUE_KINDS = (
    "AdmissionCheck",
    "ProvisioningRequestConfig",
    "MultiKueueConfig",
    "MultiKueueCluster",
    "Workload",
)
#: gpuaas' own objects, loaded next to Kueue's: what Kueue has no CRD for.
GPUAAS_API_VERSION = "gpuaas.io/v1"
GPUAAS_KINDS = ("HardwareProfile",)
_PROFILE_FIELDS = ("displayName", "description", "localQueue", "allowedTenants", "resources")
_SERVER_METADATA = {
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
}
_SCHEMA_FILES = {
    "ResourceFlavor": "kueue.x-k8s.io_resourceflavors.yaml",
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "Cohort": "kueue.x-k8s.io_cohorts.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
    "Topology": "kueue.x-k8s.io_topologies.yaml",
}


def _topology_level_labels() -> dict[str, Level]:
    """Topology node label -> gpuaas level: the levels' own labels, then the cloud labels the
    Kubernetes node loader reads for them (so a Topology means what the nodes' labels do)."""
    by_field = {
        "zone": Level.ZONE,
        "block": Level.BLOCK,
        "rack": Level.RACK,
        "nvlink_domain": Level.NVLINK,
    }
    out = {level.value: level for level in LEVELS}
    for name, labels in TOPOLOGY_LABELS.items():
        for label in labels:
            out.setdefault(label, by_field[name])
    return out


TOPOLOGY_LEVEL_LABELS = _topology_level_labels()
#: Kueue's limit on a Topology's levels.
MAX_TOPOLOGY_LEVELS = 16


#: Kueue's own fields that gpuaas does not read are refused by name, not taken for typos.
_UNSUPPORTED = "field {key!r} is not supported by gpuaas"


def _only(obj: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    only(obj, allowed, where, unknown=_UNSUPPORTED)


def _name(value: object, where: str) -> str:
    return text(value, where, strip=False)


def _resource(value: object, where: str) -> str:
    name = _name(value, where)
    check_resource_name(name, where)
    return name


def _enum(enum: type, value: object, where: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        choices = ", ".join(member.value for member in enum)
        raise InvalidValue(where, f"{value!r} is not one of {choices}") from None


def _weight(value: object, where: str) -> Fraction:
    quantity = Quantity.parse(value, where)  # type: ignore[arg-type]
    if quantity.is_negative():
        raise InvalidValue(where, "must not be negative")
    return quantity.amount


def _groups(value: object, where: str) -> tuple[ResourceGroup, ...]:
    groups = []
    for gi, raw in enumerate(sequence(value, where)):
        gwhere = f"{where}[{gi}]"
        group = mapping(raw, gwhere)
        _only(group, ("coveredResources", "flavors"), gwhere)
        covered = tuple(
            _resource(r, f"{gwhere}.coveredResources[{i}]")
            for i, r in enumerate(
                sequence(group.get("coveredResources"), f"{gwhere}.coveredResources")
            )
        )
        flavors = []
        for fi, fraw in enumerate(sequence(group.get("flavors"), f"{gwhere}.flavors")):
            fwhere = f"{gwhere}.flavors[{fi}]"
            flavor = mapping(fraw, fwhere)
            _only(flavor, ("name", "resources"), fwhere)
            quotas = []
            for ri, rraw in enumerate(sequence(flavor.get("resources"), f"{fwhere}.resources")):
                rwhere = f"{fwhere}.resources[{ri}]"
                res = mapping(rraw, rwhere)
                _only(res, ("name", "nominalQuota", "borrowingLimit", "lendingLimit"), rwhere)
                name = _resource(res.get("name"), f"{rwhere}.name")
                if "nominalQuota" not in res:
                    raise InvalidValue(f"{rwhere}.nominalQuota", "is required")

                def amount(
                    key: str, res: Mapping[str, Any] = res, name: str = name, rwhere: str = rwhere
                ) -> int | None:
                    if res.get(key) is None:
                        return None
                    return canonical_amount(name, res[key], f"{rwhere}.{key}")

                quotas.append(
                    ResourceQuota(
                        name=name,
                        nominal=amount("nominalQuota") or 0,
                        borrowing_limit=amount("borrowingLimit"),
                        lending_limit=amount("lendingLimit"),
                    )
                )
            flavors.append(
                FlavorQuotas(
                    name=_name(flavor.get("name"), f"{fwhere}.name"), resources=tuple(quotas)
                )
            )
        groups.append(ResourceGroup(covered_resources=covered, flavors=tuple(flavors)))
    return tuple(groups)


def _fair_sharing(value: object, where: str) -> Fraction | None:
    if value is None:
        return None
    fair = mapping(value, where)
    _only(fair, ("weight",), where)
    return None if fair.get("weight") is None else _weight(fair["weight"], f"{where}.weight")


def _stop_policy(spec: Mapping[str, Any], where: str) -> None:
    if spec.get("stopPolicy") not in (None, "None"):
        raise InvalidValue(
            f"{where}.stopPolicy",
            f"{spec['stopPolicy']!r} is not supported by gpuaas (only None): "
            "holding a queue is done by the service, not in configuration",
        )


def _flavor(name: str, spec: Mapping[str, Any], where: str) -> ResourceFlavor:
    _only(spec, ("nodeLabels", "nodeTaints", "tolerations", "topologyName"), where)
    labels = {
        _name(k, f"{where}.nodeLabels"): str(v)
        for k, v in mapping(spec.get("nodeLabels"), f"{where}.nodeLabels").items()
    }
    taints = []
    for i, raw in enumerate(sequence(spec.get("nodeTaints"), f"{where}.nodeTaints")):
        twhere = f"{where}.nodeTaints[{i}]"
        taint = mapping(raw, twhere)
        _only(taint, ("key", "value", "effect"), twhere)
        taints.append(
            Taint(
                key=_name(taint.get("key"), f"{twhere}.key"),
                value=str(taint.get("value") or ""),
                effect=_enum(TaintEffect, taint.get("effect"), f"{twhere}.effect"),
            )
        )
    tolerations = []
    for i, raw in enumerate(sequence(spec.get("tolerations"), f"{where}.tolerations")):
        twhere = f"{where}.tolerations[{i}]"
        tol = mapping(raw, twhere)
        _only(tol, ("key", "operator", "value", "effect"), twhere)
        operator = tol.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            raise InvalidValue(f"{twhere}.operator", f"{operator!r} is not one of Equal, Exists")
        tolerations.append(
            Toleration(
                key=str(tol.get("key") or ""),
                operator=operator,
                value=str(tol.get("value") or ""),
                effect=str(tol.get("effect") or ""),
            )
        )
    topology = spec.get("topologyName")
    return ResourceFlavor(
        name,
        labels,
        tuple(taints),
        tuple(tolerations),
        None if topology is None else _name(topology, f"{where}.topologyName"),
    )


def _topology(name: str, spec: Mapping[str, Any], where: str) -> NamedTopology:
    """Kueue's ``Topology``: 1 to 16 levels, outermost first, each a node label gpuaas reads
    (see the module docstring); their gpuaas levels must run outside-in too, each once."""
    _only(spec, ("levels",), where)
    raw_levels = sequence(spec.get("levels"), f"{where}.levels")
    if not 1 <= len(raw_levels) <= MAX_TOPOLOGY_LEVELS:
        raise InvalidValue(
            f"{where}.levels", f"must list 1 to {MAX_TOPOLOGY_LEVELS} levels, got {len(raw_levels)}"
        )
    labels: list[str] = []
    levels: list[Level] = []
    for i, raw in enumerate(raw_levels):
        lwhere = f"{where}.levels[{i}]"
        entry = mapping(raw, lwhere)
        _only(entry, ("nodeLabel",), lwhere)
        label = _name(entry.get("nodeLabel"), f"{lwhere}.nodeLabel")
        level = TOPOLOGY_LEVEL_LABELS.get(label)
        if level is None:
            raise InvalidValue(
                f"{lwhere}.nodeLabel",
                f"{label!r} is not a topology label gpuaas reads from nodes (known: "
                f"{', '.join(TOPOLOGY_LEVEL_LABELS)}); label the nodes with one of them",
            )
        if label in labels:
            raise InvalidValue(f"{lwhere}.nodeLabel", f"{label!r} is listed twice")
        if level in levels:
            raise InvalidValue(
                f"{lwhere}.nodeLabel",
                f"{label!r} is the {level.short} level, which {labels[levels.index(level)]!r} "
                "already is",
            )
        if levels and LEVELS.index(level) < LEVELS.index(levels[-1]):
            raise InvalidValue(
                f"{lwhere}.nodeLabel",
                f"levels run from the outermost to the innermost: {label!r} ({level.short}) "
                f"cannot be inside {labels[-1]!r} ({levels[-1].short})",
            )
        labels.append(label)
        levels.append(level)
    return NamedTopology(name, tuple(labels), tuple(levels))


def _cluster_queue(name: str, spec: Mapping[str, Any], where: str) -> ClusterQueue:
    _only(
        spec,
        (
            "resourceGroups",
            "cohortName",
            "queueingStrategy",
            "preemption",
            "flavorFungibility",
            "fairSharing",
            "namespaceSelector",
            "stopPolicy",
        ),
        where,
    )
    _stop_policy(spec, where)
    selector = spec.get("namespaceSelector")
    if selector is not None and mapping(selector, f"{where}.namespaceSelector"):
        raise InvalidValue(
            f"{where}.namespaceSelector",
            "only {} (every namespace) is supported: gpuaas does not know namespace labels",
        )
    pwhere = f"{where}.preemption"
    pre = mapping(spec.get("preemption"), pwhere)
    _only(pre, ("withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort"), pwhere)
    bwc = mapping(pre.get("borrowWithinCohort"), f"{pwhere}.borrowWithinCohort")
    _only(bwc, ("policy", "maxPriorityThreshold"), f"{pwhere}.borrowWithinCohort")
    preemption = PreemptionPolicy(
        within_cluster_queue=_enum(
            WithinClusterQueue,
            pre.get("withinClusterQueue", "Never"),
            f"{pwhere}.withinClusterQueue",
        ),
        reclaim_within_cohort=_enum(
            ReclaimWithinCohort,
            pre.get("reclaimWithinCohort", "Never"),
            f"{pwhere}.reclaimWithinCohort",
        ),
        borrow_within_cohort=(
            _enum(
                BorrowWithinCohortPolicy,
                bwc.get("policy", "Never"),
                f"{pwhere}.borrowWithinCohort.policy",
            )
            if "borrowWithinCohort" in pre
            else None
        ),
        max_priority_threshold=(
            None
            if bwc.get("maxPriorityThreshold") is None
            else integer(
                bwc["maxPriorityThreshold"], f"{pwhere}.borrowWithinCohort.maxPriorityThreshold"
            )
        ),
    )
    fwhere = f"{where}.flavorFungibility"
    fung = mapping(spec.get("flavorFungibility"), fwhere)
    _only(fung, ("whenCanBorrow", "whenCanPreempt", "preference"), fwhere)
    fungibility = FlavorFungibility(
        when_can_borrow=_enum(
            FungibilityPolicy, fung.get("whenCanBorrow", "MayStopSearch"), f"{fwhere}.whenCanBorrow"
        ),
        when_can_preempt=_enum(
            FungibilityPolicy,
            fung.get("whenCanPreempt", "TryNextFlavor"),
            f"{fwhere}.whenCanPreempt",
        ),
        preference=(
            None
            if fung.get("preference") is None
            else _enum(FungibilityPreference, fung["preference"], f"{fwhere}.preference")
        ),
    )
    if fungibility.preference is not None and (
        fungibility.when_can_borrow != FungibilityPolicy.TRY_NEXT_FLAVOR
        or fungibility.when_can_preempt != FungibilityPolicy.TRY_NEXT_FLAVOR
    ):  # Kueue's own validation rule: the preference only orders flavors all of which are tried
        raise InvalidValue(
            f"{fwhere}.preference",
            "can only be set when both whenCanBorrow and whenCanPreempt are TryNextFlavor",
        )
    cohort = spec.get("cohortName")
    explicit = {k for k in ("queueingStrategy", "preemption", "flavorFungibility") if k in spec}
    explicit |= {f"preemption.{k}" for k in pre}
    explicit |= {f"flavorFungibility.{k}" for k in fung}
    return ClusterQueue(
        name=name,
        resource_groups=_groups(spec.get("resourceGroups"), f"{where}.resourceGroups"),
        cohort=None if not cohort else _name(cohort, f"{where}.cohortName"),
        queueing_strategy=_enum(
            QueueingStrategy,
            spec.get("queueingStrategy", "BestEffortFIFO"),
            f"{where}.queueingStrategy",
        ),
        preemption=preemption,
        flavor_fungibility=fungibility,
        fair_sharing_weight=_fair_sharing(spec.get("fairSharing"), f"{where}.fairSharing"),
        namespace_selector=None if selector is None else {},
        explicit=frozenset(explicit),
    )


def load_objects(objects: Iterable[object], source: str = "objects") -> Governance:
    """Build a validated :class:`Governance` from Kueue objects (parsed YAML documents);
    v1beta1 and v1alpha1 objects are converted to v1beta2 first."""
    gov = Governance()
    for index, raw in enumerate(objects):
        _add_object(gov, raw, index, source)
    try:
        gov.validate()
    except InvalidValue as exc:
        raise InvalidValue(f"{source}: {exc.field}", exc.problem) from None
    return gov


def check_object(raw: object, index: int, source: str) -> dict[str, Any]:
    """One object checked on its own, as :func:`load_objects` checks it before looking at the
    others (shape, fields, kind; not its references); returns it converted to v1beta2."""
    return _add_object(Governance(), raw, index, source)


def _add_object(gov: Governance, raw: object, index: int, source: str) -> dict[str, Any]:
    where0 = f"{source}[{index}]"
    original = mapping(raw, where0)
    meta = original.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    obj = to_v1beta2(original, f"{source}: {original.get('kind')} {name}" if name else where0)
    try:
        _load_object(gov, obj, where0, source)
    except InvalidValue as exc:
        written = as_written(original, exc)
        if written is exc:
            raise
        raise written from None
    return obj


def _load_object(gov: Governance, obj: Mapping[str, Any], where0: str, source: str) -> None:
    """Add one (v1beta2 or gpuaas.io/v1) object to ``gov``, unvalidated as a whole."""
    kind = obj.get("kind")
    meta = mapping(obj.get("metadata"), f"{where0}.metadata")
    label = f"{kind} {meta.get('name', '?')}"
    if obj.get("apiVersion") == GPUAAS_API_VERSION:
        if kind not in GPUAAS_KINDS:
            raise InvalidValue(
                f"{where0}.kind",
                f"{kind!r} is not a {GPUAAS_API_VERSION} kind "
                f"(supported: {', '.join(GPUAAS_KINDS)})",
            )
        _only(obj, ("apiVersion", "kind", "metadata", "spec"), f"{source}: {label}")
        _only(meta, {"name"} | _SERVER_METADATA, f"{source}: {label}: metadata")
        name = _name(meta.get("name"), f"{source}: {kind}: metadata.name")
        _unique(gov.hardware_profiles, name, kind, source)
        gov.hardware_profiles[name] = _hardware_profile(
            name,
            mapping(obj.get("spec"), f"{source}: {kind} {name}: spec"),
            f"{source}: {kind} {name}: spec",
        )
        return
    check_kind(obj, source)
    allowed_top = {"apiVersion", "kind", "metadata", "status"}
    allowed_top |= {"value", "description"} if kind == "WorkloadPriorityClass" else {"spec"}
    _only(obj, allowed_top, f"{source}: {label}")
    allowed_meta = {"name"} | _SERVER_METADATA
    if kind == "LocalQueue":
        allowed_meta.add("namespace")
    _only(meta, allowed_meta, f"{source}: {label}: metadata")
    name = _name(meta.get("name"), f"{source}: {kind}: metadata.name")
    where = f"{source}: {kind} {name}: spec"
    spec = mapping(obj.get("spec"), where)
    if kind == "ResourceFlavor":
        _unique(gov.flavors, name, kind, source)
        gov.flavors[name] = _flavor(name, spec, where)
    elif kind == "ClusterQueue":
        _unique(gov.cluster_queues, name, kind, source)
        gov.cluster_queues[name] = _cluster_queue(name, spec, where)
    elif kind == "Cohort":
        _unique(gov.cohorts, name, kind, source)
        _only(spec, ("parentName", "resourceGroups", "fairSharing"), where)
        parent = spec.get("parentName")
        gov.cohorts[name] = Cohort(
            name=name,
            parent=None if not parent else _name(parent, f"{where}.parentName"),
            resource_groups=_groups(spec.get("resourceGroups"), f"{where}.resourceGroups"),
            fair_sharing_weight=_fair_sharing(spec.get("fairSharing"), f"{where}.fairSharing"),
        )
    elif kind == "LocalQueue":
        _only(spec, ("clusterQueue", "stopPolicy"), where)
        _stop_policy(spec, where)
        namespace = _name(meta.get("namespace"), f"{source}: LocalQueue {name}: metadata.namespace")
        lq = LocalQueue(name, namespace, _name(spec.get("clusterQueue"), f"{where}.clusterQueue"))
        _unique(gov.local_queues, lq.key, kind, source)
        gov.local_queues[lq.key] = lq
    elif kind == "Topology":
        _unique(gov.topologies, name, kind, source)
        gov.topologies[name] = _topology(name, spec, where)
    else:
        _unique(gov.priority_classes, name, kind, source)
        gov.priority_classes[name] = WorkloadPriorityClass(
            name,
            integer(obj.get("value"), f"{source}: {kind} {name}: value"),
            str(obj.get("description") or ""),
        )


def check_kind(obj: Mapping[str, Any], source: str) -> None:
    """Refuse, naming the object, what is not a v1beta2 kind gpuaas loads (after conversion):
    another API group (a Job, a Namespace: not governance) or a Kueue kind with no equivalent."""
    kind = obj.get("kind")
    meta = obj.get("metadata")
    label = f"{kind} {meta.get('name', '?') if isinstance(meta, Mapping) else '?'}"
    if obj.get("apiVersion") != API_VERSION:
        raise InvalidValue(
            f"{source}: {label}: apiVersion",
            f"{obj.get('apiVersion')!r} is not supported: {not_governance(obj)}",
        )
    if kind not in KINDS:
        why = (
            "gpuaas has no equivalent"
            if kind in UNSUPPORTED_KUEUE_KINDS
            else "not a Kueue governance kind"
        )
        raise InvalidValue(
            f"{source}: {label}: kind",
            f"{kind!r} is not supported ({why}; supported: {', '.join(KINDS)})",
        )


def not_governance(obj: Mapping[str, Any]) -> str:
    """Why an object of another API group or version is not imported."""
    version = obj.get("apiVersion")
    if isinstance(version, str) and version.startswith("kueue.x-k8s.io/"):
        return (
            f"Kueue API versions read are {API_VERSION}, {V1BETA1} and {V1ALPHA1} "
            "(converted as Kueue converts them)"
        )
    return (
        f"{obj.get('kind')} is not a Kueue governance object (gpuaas imports "
        f"{API_VERSION} {', '.join(KINDS)}, and {GPUAAS_API_VERSION} {', '.join(GPUAAS_KINDS)}); "
        "submit workloads with `gpuaas jobs submit`, tenants are created with `gpuaas tenants`"
    )


def same_object(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two documents of one object mean the same: equal once loaded, so quantities
    compare by amount (``cpu: 3072`` and ``cpu: 3Ki`` are one quota). Either failing to load
    on its own (a reference to an object the other one lacks does not count) is a change."""
    try:
        left, right = Governance(), Governance()
        _add_object(left, a, 0, "a")
        _add_object(right, b, 0, "b")
    except InvalidValue:
        return False
    return left == right and _explicit(left) == _explicit(right)


def _explicit(gov: Governance) -> dict[str, frozenset[str]]:
    """What each ClusterQueue wrote out at its default (not part of ClusterQueue equality)."""
    return {name: cq.explicit for name, cq in gov.cluster_queues.items()}


def _amount(resource: str, value: object, where: str) -> int:
    if value is None or isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidValue(where, f"expected a quantity, got {value!r}")
    return canonical_amount(resource, value, where)


def _hardware_profile(name: str, spec: Mapping[str, Any], where: str) -> HardwareProfile:
    """``gpuaas.io/v1 HardwareProfile``: see :class:`~gpuaas.model.governance.HardwareProfile`."""
    _only(spec, _PROFILE_FIELDS, where)
    for required in ("displayName", "localQueue", "resources"):
        if required not in spec:
            raise InvalidValue(f"{where}.{required}", "is required")
    ranges = []
    for i, raw in enumerate(sequence(spec.get("resources"), f"{where}.resources")):
        rwhere = f"{where}.resources[{i}]"
        res = mapping(raw, rwhere)
        _only(res, ("name", "min", "default", "max"), rwhere)
        resource = _name(res.get("name"), f"{rwhere}.name")
        for required in ("min", "default"):
            if required not in res:
                raise InvalidValue(f"{rwhere}.{required}", "is required")
        ranges.append(
            ResourceRange(
                resource,
                _amount(resource, res["min"], f"{rwhere}.min"),
                _amount(resource, res["default"], f"{rwhere}.default"),
                None if res.get("max") is None else _amount(resource, res["max"], f"{rwhere}.max"),
            )
        )
    tenants = tuple(
        _name(t, f"{where}.allowedTenants[{i}]")
        for i, t in enumerate(sequence(spec.get("allowedTenants"), f"{where}.allowedTenants"))
    )
    description = spec.get("description")
    return HardwareProfile(
        name=name,
        display_name=_name(spec.get("displayName"), f"{where}.displayName"),
        local_queue=_name(spec.get("localQueue"), f"{where}.localQueue"),
        resources=tuple(ranges),
        allowed_tenants=tenants,
        description="" if description is None else _name(description, f"{where}.description"),
    )


def _unique(existing: Mapping[str, object], name: str, kind: str, source: str) -> None:
    if name in existing:
        raise InvalidValue(f"{source}: {kind} {name}", "defined twice")


def load_yaml(path: str | Path) -> Governance:
    """Read a multi-document Kueue YAML file (or a ``kind: List``)."""
    path = Path(path)
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    except OSError as exc:
        raise GpuaasError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise GpuaasError(f"{path}: not valid YAML: {exc}") from None
    if len(docs) == 1 and isinstance(docs[0], Mapping) and docs[0].get("kind") == "List":
        docs = sequence(docs[0].get("items"), f"{path}: items")
    return load_objects(docs, str(path))


# --- export -------------------------------------------------------------------------------


def _export_groups(groups: tuple[ResourceGroup, ...]) -> list[dict[str, Any]]:
    out = []
    for group in groups:
        flavors = []
        for flavor in group.flavors:
            resources = []
            for q in flavor.resources:
                res: dict[str, Any] = {
                    "name": q.name,
                    "nominalQuota": format_amount(q.name, q.nominal),
                }
                if q.borrowing_limit is not None:
                    res["borrowingLimit"] = format_amount(q.name, q.borrowing_limit)
                if q.lending_limit is not None:
                    res["lendingLimit"] = format_amount(q.name, q.lending_limit)
                resources.append(res)
            flavors.append({"name": flavor.name, "resources": resources})
        out.append({"coveredResources": list(group.covered_resources), "flavors": flavors})
    return out


def _export_weight(weight: Fraction) -> str:
    return str(Quantity(weight))


def export_objects(gov: Governance) -> list[dict[str, Any]]:
    """Kueue v1beta2 objects for ``gov``; ``load_objects(export_objects(g))`` gives ``g`` back."""
    out: list[dict[str, Any]] = []

    def obj(kind: str, name: str, body: dict[str, Any], namespace: str | None = None) -> None:
        meta: dict[str, Any] = {"name": name}
        if namespace is not None:
            meta["namespace"] = namespace
        out.append({"apiVersion": API_VERSION, "kind": kind, "metadata": meta, **body})

    for t in gov.topologies.values():
        levels = [{"nodeLabel": label} for label in t.node_labels]
        obj("Topology", t.name, {"spec": {"levels": levels}})
    for f in gov.flavors.values():
        spec: dict[str, Any] = {}
        if f.node_labels:
            spec["nodeLabels"] = dict(f.node_labels)
        if f.node_taints:
            spec["nodeTaints"] = [
                {"key": t.key, **({"value": t.value} if t.value else {}), "effect": str(t.effect)}
                for t in f.node_taints
            ]
        if f.tolerations:
            spec["tolerations"] = [
                {
                    k: v
                    for k, v in (
                        ("key", t.key),
                        ("operator", t.operator),
                        ("value", t.value),
                        ("effect", t.effect),
                    )
                    if v
                }
                for t in f.tolerations
            ]
        if f.topology_name is not None:
            spec["topologyName"] = f.topology_name
        obj("ResourceFlavor", f.name, {"spec": spec})
    for c in gov.cohorts.values():
        spec = {}
        if c.parent:
            spec["parentName"] = c.parent
        if c.resource_groups:
            spec["resourceGroups"] = _export_groups(c.resource_groups)
        if c.fair_sharing_weight is not None:
            spec["fairSharing"] = {"weight": _export_weight(c.fair_sharing_weight)}
        obj("Cohort", c.name, {"spec": spec})
    for cq in gov.cluster_queues.values():
        p = cq.preemption
        shown = cq.explicit

        def keep(path: str, value: object, default: object, shown: frozenset[str] = shown) -> bool:
            return path in shown or value != default

        preemption: dict[str, Any] = {}
        if keep("preemption.withinClusterQueue", p.within_cluster_queue, "Never"):
            preemption["withinClusterQueue"] = str(p.within_cluster_queue)
        if keep("preemption.reclaimWithinCohort", p.reclaim_within_cohort, "Never"):
            preemption["reclaimWithinCohort"] = str(p.reclaim_within_cohort)
        if p.borrow_within_cohort is not None:
            bwc: dict[str, Any] = {"policy": str(p.borrow_within_cohort)}
            if p.max_priority_threshold is not None:
                bwc["maxPriorityThreshold"] = p.max_priority_threshold
            preemption["borrowWithinCohort"] = bwc
        fung: dict[str, Any] = {}
        ff = cq.flavor_fungibility
        if keep("flavorFungibility.whenCanBorrow", ff.when_can_borrow, "MayStopSearch"):
            fung["whenCanBorrow"] = str(ff.when_can_borrow)
        if keep("flavorFungibility.whenCanPreempt", ff.when_can_preempt, "TryNextFlavor"):
            fung["whenCanPreempt"] = str(ff.when_can_preempt)
        if ff.preference is not None:
            fung["preference"] = str(ff.preference)
        spec = {}
        if cq.namespace_selector is not None:
            spec["namespaceSelector"] = {}
        if cq.cohort:
            spec["cohortName"] = cq.cohort
        if keep("queueingStrategy", cq.queueing_strategy, "BestEffortFIFO"):
            spec["queueingStrategy"] = str(cq.queueing_strategy)
        if fung or "flavorFungibility" in shown:
            spec["flavorFungibility"] = fung
        if preemption or "preemption" in shown:
            spec["preemption"] = preemption
        if cq.fair_sharing_weight is not None:
            spec["fairSharing"] = {"weight": _export_weight(cq.fair_sharing_weight)}
        spec["resourceGroups"] = _export_groups(cq.resource_groups)
        obj("ClusterQueue", cq.name, {"spec": spec})
    for lq in gov.local_queues.values():
        obj("LocalQueue", lq.name, {"spec": {"clusterQueue": lq.cluster_queue}}, lq.namespace)
    for pc in gov.priority_classes.values():
        body: dict[str, Any] = {"value": pc.value}
        if pc.description:
            body["description"] = pc.description
        obj("WorkloadPriorityClass", pc.name, body)
    for hp in gov.hardware_profiles.values():
        out.append(export_profile(hp))
    return out


def export_profile(hp: HardwareProfile) -> dict[str, Any]:
    """The ``gpuaas.io/v1 HardwareProfile`` object for ``hp`` (what :func:`load_objects` reads)."""
    resources = []
    for r in hp.resources:
        entry: dict[str, Any] = {
            "name": r.name,
            "min": format_amount(r.name, r.minimum),
            "default": format_amount(r.name, r.default),
        }
        if r.maximum is not None:
            entry["max"] = format_amount(r.name, r.maximum)
        resources.append(entry)
    spec: dict[str, Any] = {"displayName": hp.display_name}
    if hp.description:
        spec["description"] = hp.description
    spec["localQueue"] = hp.local_queue
    if hp.allowed_tenants:
        spec["allowedTenants"] = list(hp.allowed_tenants)
    spec["resources"] = resources
    return {
        "apiVersion": GPUAAS_API_VERSION,
        "kind": "HardwareProfile",
        "metadata": {"name": hp.name},
        "spec": spec,
    }


def dump_yaml(gov: Governance) -> str:
    return yaml.safe_dump_all(export_objects(gov), sort_keys=False)


@functools.lru_cache(maxsize=16)
def kueue_schema(kind: str, schema_dir: str | Path) -> dict[str, Any]:
    """The v1beta2 OpenAPI schema of ``kind`` from Kueue's CRD files in ``schema_dir``
    (cached: the CRD files are large and do not change)."""
    path = Path(schema_dir) / _SCHEMA_FILES[kind]
    crd = yaml.safe_load(path.read_text())
    for version in crd["spec"]["versions"]:
        if version["name"] == "v1beta2":
            return version["schema"]["openAPIV3Schema"]
    raise GpuaasError(f"{path}: no v1beta2 version")


def validate_against_schema(objects: Iterable[Mapping[str, Any]], schema_dir: str | Path) -> None:
    """Check objects against Kueue's CRD schemas (needs the ``jsonschema`` test extra).

    gpuaas' own kinds (``gpuaas.io/v1``) have no Kueue schema; they are skipped here and checked
    field by field by :func:`load_objects` instead."""
    for obj in objects:
        if obj.get("apiVersion") == GPUAAS_API_VERSION:
            continue
        validator = _validator(str(obj["kind"]), str(schema_dir))
        errors = sorted(validator.iter_errors(obj), key=lambda e: list(e.path))
        if errors:
            first = errors[0]
            path = ".".join(str(p) for p in first.path)
            raise InvalidValue(f"{obj['kind']} {obj['metadata']['name']}: {path}", first.message)


@functools.lru_cache(maxsize=16)
def _validator(kind: str, schema_dir: str) -> Any:
    import jsonschema  # a test/tooling dependency, imported only when validating

    return jsonschema.Draft7Validator(_openapi_to_jsonschema(kueue_schema(kind, schema_dir)))


def _openapi_to_jsonschema(node: Any) -> Any:
    """OpenAPI v3 CRD schema -> JSON Schema: int-or-string becomes an anyOf."""
    if isinstance(node, list):
        return [_openapi_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {
        k: _openapi_to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes")
    }
    if node.get("x-kubernetes-int-or-string"):
        out.pop("anyOf", None)
        pattern = out.pop("pattern", None)
        string: dict[str, Any] = {"type": "string"}
        if pattern:
            string["pattern"] = pattern
        out["anyOf"] = [{"type": "integer"}, string]
    return out
