"""Kubernetes Node objects as ``kubectl get nodes -o yaml`` (or ``-o json``) prints them.

What a node can schedule comes from ``status.allocatable``; what its GPUs are comes from the labels
of GPU feature discovery and mig-manager (``nvidia.com/gpu.product``, ``nvidia.com/gpu.count``,
``nvidia.com/mig.config``, ``nvidia.com/mig-<profile>.count``, ``nvidia.com/gpu.replicas``). From
both the loader rebuilds each GPU's partitioning:

* MPS: ``nvidia.com/gpu.sharing-strategy: mps`` (the device plugin's ``sharing.mps``; GFD also
  appends ``-SHARED`` to the product and sets ``nvidia.com/gpu.replicas``): every GPU shared by
  ``replicas`` MPS clients, each limited to its share of memory and SMs;
* time-slicing: ``nvidia.com/gpu.replicas`` > 1 or ``sharing-strategy: time-slicing``
  (allocatable ``nvidia.com/gpu``, or ``nvidia.com/gpu.shared`` with ``renameByDefault``, is
  GPUs x replicas);
* MIG, ``mixed`` strategy: allocatable ``nvidia.com/mig-<profile>`` counts (else the
  ``nvidia.com/mig-<profile>.count`` labels), spread over the GPUs in
  MIG mode (``gpu.count`` minus the whole GPUs left in allocatable ``nvidia.com/gpu``); a named
  ``mig.config`` such as ``all-1g.10gb`` or ``all-balanced`` is used when it matches the counts;
* MIG, ``single`` strategy: the product label ends in ``-MIG-<profile>`` and every GPU holds the
  profile's maximum number of instances;
* otherwise whole GPUs.

A GPU the catalogue does not know registers from its GFD labels: the model is named after
``nvidia.com/gpu.product`` (:func:`gpuaas.supply.catalogue.model_name`), its memory is
``nvidia.com/gpu.memory`` (MiB), family and compute capability stay in the node's labels. Its
MIG geometry cannot be read from labels, so MIG devices on such a GPU are refused with a pointer
to the catalogue file that adds it.

Topology comes from the labels a caller configures per level (:func:`topology_labels`: a
cluster's own rack or block label), then the labels gpuaas uses
(:class:`gpuaas.model.topology.Level`, whose NVLink domain is GFD's ``nvidia.com/gpu.clique``),
else the well-known cloud ones (GKE's ``cloud.google.com/gce-topology-*``, EKS's
``topology.k8s.aws/network-node-layer-*``). Labels and taints are kept as they are.

NICs (:mod:`gpuaas.supply.loaders.kubernetes_nics`): the SR-IOV and RDMA device plugins'
resources in allocatable (``openshift.io/<pool>``, ``nvidia.com/<rdma pool>``,
``rdma/<pool>``) become the node's NICs, their layout and GPU affinity read from the
``gpuaas.io/nics`` and ``gpuaas.io/gpu-topology`` annotations when the node has them, their
link type and RDMA capability otherwise guessed from the pool's name and NFD's labels.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

from gpuaas.model.devices import GPU, Partition
from gpuaas.model.document import labels as document_labels
from gpuaas.model.document import mapping, sequence
from gpuaas.model.errors import GpuaasError, InvalidValue
from gpuaas.model.node import Fleet, Node, Taint, TaintEffect
from gpuaas.model.resources import CPU, MEMORY, MIG_PREFIX, NVIDIA_GPU, canonical_amount
from gpuaas.model.topology import Level, Topology
from gpuaas.supply.catalogue import GpuModel, lookup
from gpuaas.supply.loaders._common import (
    MAX_GPUS_PER_NODE,
    MAX_REPLICAS,
    SOURCE_MODEL_LABEL,
    gpu_uuid,
    read_text,
)
from gpuaas.supply.loaders._yaml import parse_json, parse_yaml
from gpuaas.supply.loaders.errors import FleetFileError
from gpuaas.supply.loaders.kubernetes_nics import gpu_topology, nic_pools, node_nics
from gpuaas.supply.mig import layout_counts
from gpuaas.supply.partition import parse_mig_config_label, partition_gpu

SHARED_GPU = "nvidia.com/gpu.shared"  # the device plugin's resource name with renameByDefault
PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
GPU_MEMORY = "nvidia.com/gpu.memory"
REPLICAS = "nvidia.com/gpu.replicas"
SHARING = "nvidia.com/gpu.sharing-strategy"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STRATEGY = "nvidia.com/mig.strategy"
#: GFD's memory label is MiB per GPU; a bound that catches a typo or a byte count (the largest
#: GPUs have under 300 GiB).
MAX_GPU_MEMORY_MIB = 4 * 2**20

#: Labels read for each topology level, first found wins.
TOPOLOGY_LABELS: dict[str, tuple[str, ...]] = {
    "zone": (Level.ZONE.value, "failure-domain.beta.kubernetes.io/zone"),
    "block": (
        Level.BLOCK.value,
        "cloud.google.com/gce-topology-block",
        "topology.k8s.aws/network-node-layer-2",
        "cloud.provider.com/topology-block",
    ),
    "rack": (
        Level.RACK.value,
        "cloud.google.com/gce-topology-subblock",
        "topology.k8s.aws/network-node-layer-3",
        "cloud.provider.com/topology-rack",
    ),
    "nvlink_domain": (Level.NVLINK.value,),
}
_SINGLE_MIG = re.compile(r"-MIG-(?P<profile>\d+g\.\d+gb(?:\+me)?)\Z", re.IGNORECASE)
_MIG_COUNT_LABEL = re.compile(r"^nvidia\.com/mig-(?P<profile>\d+g\.\d+gb(?:\+me)?)\.count$")
_NODE_KINDS = ("List", "NodeList")


def looks_like_kubernetes(document: object) -> bool:
    """True for a Node, or a List/NodeList, as kubectl prints them."""
    return isinstance(document, Mapping) and (
        document.get("kind") == "Node"
        or (document.get("kind") in _NODE_KINDS and isinstance(document.get("items"), list))
    )


def load_kubernetes_nodes(path: str | PathLike[str]) -> Fleet:
    """Read ``kubectl get nodes -o yaml|json`` output (a List/NodeList or one Node)."""
    path = Path(path)
    text = read_text(path)
    document = parse_json(text, path) if path.suffix.lower() == ".json" else parse_yaml(text, path)
    return nodes_from_document(document, path)


def topology_labels(configured: Mapping[str, str] | None = None) -> dict[str, tuple[str, ...]]:
    """The labels read for each topology level: ``configured`` (level -> label, e.g. ``rack``
    -> ``example.com/rack``: the cluster's own rack or block label) first, then the usual ones.
    Levels: ``zone``, ``block``, ``rack``, ``nvlink`` (the NVLink domain, GFD's
    ``nvidia.com/gpu.clique`` by default)."""
    out = dict(TOPOLOGY_LABELS)
    for level, label in (configured or {}).items():
        key = "nvlink_domain" if level in ("nvlink", "nvlink-domain", "nvlink_domain") else level
        if key not in out:
            raise InvalidValue(
                "topologyLabels",
                f"unknown level {level!r} (zone, block, rack or nvlink)",
            )
        if not isinstance(label, str) or not label:
            raise InvalidValue(f"topologyLabels.{level}", "expected a node label name")
        out[key] = (label, *(k for k in out[key] if k != label))
    return out


def nodes_from_document(
    document: object,
    path: str | PathLike[str],
    labels: Mapping[str, tuple[str, ...]] | None = None,
) -> Fleet:
    """Build a Fleet from parsed Node objects; ``path`` names the source in errors;
    ``labels``: the topology labels per level (:func:`topology_labels`)."""
    if not isinstance(document, Mapping):
        raise FleetFileError(path, "expected a Kubernetes Node or NodeList object")
    kind = document.get("kind")
    if kind == "Node":
        items: list[Any] = [document]
        prefix = ""
    elif kind in _NODE_KINDS:
        items = document.get("items")  # type: ignore[assignment]
        if not isinstance(items, list):
            raise FleetFileError(path, "expected a list of Node objects", field="items")
        prefix = "items"
    else:
        raise FleetFileError(path, f"expected Node, NodeList or List, got {kind!r}", field="kind")
    nodes: list[Node] = []
    seen: dict[str, str] = {}
    for number, item in enumerate(items):
        entry = f"{prefix}[{number}]" if prefix else ""
        name = _name_of(item)
        if name:
            entry = f"{entry} ({name})" if entry else name
        try:
            node = node_from_object(item, labels)
        except InvalidValue as exc:
            raise FleetFileError(path, exc.problem, entry=entry, field=exc.field) from None
        except GpuaasError as exc:
            raise FleetFileError(path, str(exc), entry=entry) from None
        if node.name in seen:
            raise FleetFileError(
                path,
                f"duplicate node name, already at {seen[node.name]}",
                entry=entry,
                field="metadata.name",
            )
        seen[node.name] = entry
        nodes.append(node)
    return Fleet(nodes=nodes, source=str(path))


def _name_of(item: object) -> str:
    if isinstance(item, Mapping) and isinstance(item.get("metadata"), Mapping):
        name = item["metadata"].get("name")
        return name if isinstance(name, str) else ""
    return ""


def _label_int(
    labels: Mapping[str, str], key: str, minimum: int = 0, maximum: int = MAX_GPUS_PER_NODE
) -> int | None:
    if key not in labels:
        return None
    text = labels[key].strip()
    if not (text.isascii() and text.isdigit()) or not minimum <= int(text) <= maximum:
        raise InvalidValue(
            f"metadata.labels.{key}",
            f"must be an integer from {minimum} to {maximum}, got {labels[key]!r}",
        )
    return int(text)


def _bounded(amount: int, field: str, maximum: int) -> int:
    if amount > maximum:
        raise InvalidValue(field, f"{amount} is implausible for one node (at most {maximum})")
    return amount


def node_from_object(obj: object, levels: Mapping[str, tuple[str, ...]] | None = None) -> Node:
    """One Node object to a :class:`Node`; raises InvalidValue naming the field. ``levels``:
    the labels read per topology level (default :data:`TOPOLOGY_LABELS`)."""
    if not isinstance(obj, Mapping):
        raise InvalidValue("", f"expected a Node object, got {type(obj).__name__}")
    if obj.get("kind", "Node") != "Node":
        raise InvalidValue("kind", f"expected Node, got {obj.get('kind')!r}")
    metadata = mapping(obj.get("metadata"), "metadata")
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidValue("metadata.name", "is required")
    labels = document_labels(metadata.get("labels"), "metadata.labels")
    annotations = document_labels(metadata.get("annotations"), "metadata.annotations")
    spec = mapping(obj.get("spec"), "spec")
    status = mapping(obj.get("status"), "status")
    where = "status.allocatable"
    allocatable = mapping(status.get("allocatable"), where)
    if not allocatable and status.get("capacity"):
        where = "status.capacity"
        allocatable = mapping(status.get("capacity"), where)
    amounts: dict[str, int] = {}
    for resource, value in allocatable.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise InvalidValue(f"{where}.{resource}", f"expected a quantity, got {value!r}")
        amounts[str(resource)] = canonical_amount(str(resource), value, f"{where}.{resource}")
    for required in (CPU, MEMORY):
        if required not in amounts:
            raise InvalidValue(f"{where}.{required}", "is required")
    mig_counts = {
        resource.removeprefix(MIG_PREFIX): amount
        for resource, amount in amounts.items()
        if resource.startswith(MIG_PREFIX) and amount > 0
    }
    if not any(resource.startswith(MIG_PREFIX) for resource in amounts):
        # No MIG resources in allocatable (e.g. a trimmed object): GFD's per-profile count labels.
        for key in labels:
            match = _MIG_COUNT_LABEL.fullmatch(key)
            count = _label_int(labels, key, maximum=7 * MAX_GPUS_PER_NODE) if match else None
            if match and count:
                mig_counts[match["profile"]] = count
    gpus = gpu_topology(_gpus(name, labels, amounts, mig_counts, where), annotations)
    pools = nic_pools(amounts, where)
    nics = node_nics(pools, labels, annotations)
    extra = {
        resource: amount
        for resource, amount in amounts.items()
        if resource not in (CPU, MEMORY, NVIDIA_GPU, SHARED_GPU)
        and not resource.startswith(MIG_PREFIX)
        and resource not in pools
        and amount > 0
    }
    topology = Topology(
        **{
            level: next((labels[key] for key in keys if labels.get(key)), "")
            for level, keys in (levels or TOPOLOGY_LABELS).items()
        }
    )
    if gpus and labels.get(PRODUCT):
        labels[SOURCE_MODEL_LABEL] = labels[PRODUCT]
    return Node(
        name=name,
        cpu_milli=amounts[CPU],
        memory_bytes=amounts[MEMORY],
        gpus=gpus,
        topology=topology,
        labels=labels,
        taints=_taints(spec),
        extra=extra,
        nics=nics,
    )


def _taints(spec: Mapping[str, Any]) -> list[Taint]:
    taints = []
    for number, item in enumerate(sequence(spec.get("taints"), "spec.taints")):
        field = f"spec.taints[{number}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            raise InvalidValue(field, "expected a taint with key and effect")
        try:
            effect = TaintEffect(item.get("effect", ""))
        except ValueError:
            raise InvalidValue(
                f"{field}.effect",
                f"must be one of {', '.join(e.value for e in TaintEffect)}, "
                f"got {item.get('effect')!r}",
            ) from None
        taints.append(Taint(key=item["key"], value=str(item.get("value") or ""), effect=effect))
    if spec.get("unschedulable") is True:  # kubectl cordon; the node controller adds this taint
        cordon = Taint("node.kubernetes.io/unschedulable", "", TaintEffect.NO_SCHEDULE)
        if cordon not in taints:
            taints.append(cordon)
    return taints


def _gpus(
    node: str,
    labels: Mapping[str, str],
    amounts: Mapping[str, int],
    mig_counts: dict[str, int],
    where: str,
) -> list[GPU]:
    product = labels.get(PRODUCT, "")
    limit = MAX_GPUS_PER_NODE * MAX_REPLICAS  # time-sliced GPUs advertise GPUs x replicas
    allocated = _bounded(amounts.get(NVIDIA_GPU, 0), f"{where}.{NVIDIA_GPU}", limit)
    allocated += _bounded(amounts.get(SHARED_GPU, 0), f"{where}.{SHARED_GPU}", limit)
    for profile, count in mig_counts.items():
        _bounded(count, f"{where}.{MIG_PREFIX}{profile}", 7 * MAX_GPUS_PER_NODE)
    if not product and not allocated and not mig_counts:
        return []
    model = lookup(product) if product else lookup("unknown")
    memory_mib = model.memory_mib
    if model.generic:
        memory_mib = _label_int(labels, GPU_MEMORY, maximum=MAX_GPU_MEMORY_MIB) or 0
    # Under MIG's single strategy gpu.count counts MIG devices, up to 7 per GPU.
    physical = _label_int(labels, COUNT, maximum=7 * MAX_GPUS_PER_NODE)
    replicas = _label_int(labels, REPLICAS, minimum=1, maximum=MAX_REPLICAS) or 1
    sharing = labels.get(SHARING, "").strip().lower()
    single = _SINGLE_MIG.search(product)
    if (single and labels.get(MIG_STRATEGY) == "single") or mig_counts:
        if model.generic:
            raise InvalidValue(
                f"metadata.labels.{PRODUCT}",
                f"{product!r} is not in the GPU catalogue, so its MIG geometry is unknown; add "
                "the model with a catalogue file (gpuaas --catalogue FILE, docs/inventory.md)",
            )
        if replicas > 1 or sharing in ("mps", "time-slicing"):
            raise InvalidValue(
                f"metadata.labels.{REPLICAS if replicas > 1 else SHARING}",
                "sharing MIG devices (time-slicing or MPS) is not supported; load the node with "
                "whole MIG devices",
            )
    if labels.get(MIG_STRATEGY) == "single" and single:
        partitions = _single_mig(model, single["profile"], labels, allocated, where)
    elif mig_counts:
        partitions = _mixed_mig(model, labels, amounts.get(NVIDIA_GPU, 0), mig_counts, physical)
    elif replicas > 1 or sharing in ("time-slicing", "mps"):
        if physical is None:
            if allocated % replicas:
                raise InvalidValue(
                    f"{where}.{NVIDIA_GPU}",
                    f"{allocated} is not a multiple of {replicas} replicas and "
                    f"{COUNT} is missing, so the number of GPUs is unknown",
                )
            physical = allocated // replicas
        physical = _bounded(physical, f"metadata.labels.{COUNT}", MAX_GPUS_PER_NODE)
        mode = "mps" if sharing == "mps" else "time-slicing"
        partitions = [partition_gpu(model, {mode: {"replicas": replicas}})] * physical
    else:
        count = amounts.get(NVIDIA_GPU, physical or 0)
        count = _bounded(count, f"{where}.{NVIDIA_GPU}", MAX_GPUS_PER_NODE)
        partitions = [Partition.whole()] * count
    return [
        GPU(
            index=index,
            uuid=gpu_uuid(node, index),
            model=model.name,
            memory_mib=memory_mib,
            partition=partition,
        )
        for index, partition in enumerate(partitions)
    ]


def _single_mig(
    model: GpuModel, profile: str, labels: Mapping[str, str], allocated: int, where: str
) -> list[Partition]:
    """Single strategy: ``gpu.count`` (and ``nvidia.com/gpu``) count MIG devices of one profile."""
    devices = _label_int(labels, COUNT, maximum=7 * MAX_GPUS_PER_NODE)
    if devices is None:
        devices = allocated
    partition = partition_gpu(model, {"mig": f"all-{profile}"})
    per_gpu = len(partition.instances)
    if per_gpu == 0 or devices % per_gpu:
        raise InvalidValue(
            f"{where}.{NVIDIA_GPU}",
            f"{devices} {profile} MIG devices is not a whole number of GPUs "
            f"({per_gpu} per {model.name})",
        )
    return [partition] * _bounded(devices // per_gpu, f"{where}.{NVIDIA_GPU}", MAX_GPUS_PER_NODE)


def _mixed_mig(
    model: GpuModel,
    labels: Mapping[str, str],
    whole: int,
    mig_counts: dict[str, int],
    physical: int | None,
) -> list[Partition]:
    """Spread MIG instances over the GPUs in MIG mode, as mig-manager would have laid them out."""
    if not model.mig_capable:
        raise InvalidValue(
            f"metadata.labels.{PRODUCT}",
            f"{labels.get(PRODUCT)!r} does not support MIG but the node advertises "
            + ", ".join(f"{MIG_PREFIX}{p}" for p in sorted(mig_counts)),
        )
    if physical is not None:
        _bounded(physical, f"metadata.labels.{COUNT}", MAX_GPUS_PER_NODE)
    mig_gpus = None if physical is None else physical - whole
    if mig_gpus is not None and mig_gpus <= 0:
        raise InvalidValue(
            f"metadata.labels.{COUNT}",
            f"{physical} GPUs, {whole} of them whole, leave none for the MIG devices",
        )
    named = _named_layout(model, labels.get(MIG_CONFIG, ""), mig_counts, mig_gpus)
    if named is not None:
        return [Partition.whole()] * whole + named
    layouts = _spread(model, mig_counts, mig_gpus)
    return [Partition.whole()] * whole + layouts


def _named_layout(
    model: GpuModel, config: str, mig_counts: Mapping[str, int], mig_gpus: int | None
) -> list[Partition] | None:
    """The named mig.config's layout on every MIG GPU, when that explains the counts exactly."""
    if not config.startswith("all-") or config in ("all-disabled", "all-enabled"):
        return None
    try:
        partition = parse_mig_config_label(model, config)
    except GpuaasError:
        return None
    per_gpu = layout_counts(partition.instances)
    if not per_gpu or set(per_gpu) != set(mig_counts):
        return None
    gpus: int | None = None
    for profile, per in per_gpu.items():
        whole_gpus, rest = divmod(mig_counts[profile], per)
        if rest or (gpus is not None and whole_gpus != gpus):
            return None
        gpus = whole_gpus
    if not gpus or (mig_gpus is not None and gpus != mig_gpus):
        return None
    return [partition] * gpus


def _spread(
    model: GpuModel, mig_counts: Mapping[str, int], mig_gpus: int | None
) -> list[Partition]:
    """Largest instances first, each onto the GPU with the most free compute that can take it."""
    profiles = sorted(
        (model.mig_profile(name) for name, count in mig_counts.items() for _ in range(count)),
        key=lambda p: (-p.placement_size, -p.compute_slices, p.name),
    )
    layouts: list[dict[str, int]] = [{} for _ in range(mig_gpus or 0)]
    cached: dict[tuple[tuple[str, int], ...], Partition | None] = {}

    def plan(layout: dict[str, int]) -> Partition | None:
        key = tuple(sorted(layout.items()))
        if key not in cached:
            try:
                cached[key] = partition_gpu(model, {"mig": dict(layout)})
            except GpuaasError:
                cached[key] = None
        return cached[key]

    def used(layout: dict[str, int]) -> int:
        return sum(model.mig_profile(p).compute_slices * n for p, n in layout.items())

    for profile in profiles:
        for layout in sorted(layouts, key=used):
            trial = {**layout, profile.name: layout.get(profile.name, 0) + 1}
            if plan(trial) is not None:
                layout.update(trial)
                break
        else:
            if mig_gpus is not None:
                wanted = ", ".join(f"{n}x{p}" for p, n in sorted(mig_counts.items()))
                raise InvalidValue(
                    f"status.allocatable.{MIG_PREFIX}{profile.name}",
                    f"the MIG devices ({wanted}) do not fit on the node's {mig_gpus} GPU(s) "
                    f"in MIG mode ({model.name})",
                )
            layouts.append({profile.name: 1})
    out = []
    for layout in layouts:
        partition = plan(layout)  # an empty layout is a GPU in MIG mode with no instances
        assert partition is not None  # every layout kept was planned successfully
        out.append(partition)
    return out
