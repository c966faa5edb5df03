"""Partitioning GPUs, and what a node then advertises and is labelled with.

A GPU is offered whole, cut into MIG instances, or shared by replicas, time-sliced or under MPS.
The node then shows what NVIDIA's GPU operator would show: allocatable ``nvidia.com/gpu`` (whole
GPUs plus the replicas of shared ones; MIG-mode GPUs do not count under the ``mixed`` strategy) and
``nvidia.com/mig-<profile>``, and the labels of GPU feature discovery and mig-manager
(``nvidia.com/gpu.product``, ``nvidia.com/mig.config``, ``nvidia.com/mig-<profile>.count``, ...).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Set
from dataclasses import replace
from typing import Any

from gpuaas.model.devices import GPU, Partition, PartitionMode
from gpuaas.model.node import Node
from gpuaas.model.resources import CPU, MEMORY, NVIDIA_GPU, ResourceList, mig_resource
from gpuaas.supply.catalogue import GpuModel, lookup
from gpuaas.supply.devices import device_names
from gpuaas.supply.mig import (
    ALL_DISABLED,
    ALL_ENABLED,
    PartitionError,
    check_layout,
    layout_counts,
    parse_layout,
    plan_layout,
)
from gpuaas.supply.nics import nic_resources

MIG_STRATEGY = "mixed"
_TIME_SLICING_KEYS = ("time-slicing", "time_slicing", "timeslicing", "timeSlicing", "time-sliced")
_TS_TEXT = re.compile(r"^(?:time-slic(?:ing|ed)|ts)\s*[:=x ]\s*(\d+)$", re.IGNORECASE)
_MPS_TEXT = re.compile(r"^mps\s*[:=x ]\s*(\d+)$", re.IGNORECASE)
_WHOLE = ("", "whole", "none", "full", ALL_DISABLED)


def _fail(field: str, message: str) -> PartitionError:
    return PartitionError(f"{field}: {message}" if field else message)


def _replicas(value: Any, field: str) -> int:
    """Replicas from ``N``, ``{"replicas": N}`` or the device plugin's ``resources`` list."""
    if isinstance(value, Mapping):
        if "resources" in value:  # sharing.timeSlicing.resources[{name, replicas}]
            entries = value["resources"]
            if not isinstance(entries, list):
                raise _fail(field, "time-slicing resources must be a list")
            gpu_entries = [
                e for e in entries if isinstance(e, Mapping) and e.get("name") == NVIDIA_GPU
            ]
            if len(gpu_entries) != 1:
                raise _fail(field, f"time-slicing resources need one entry named {NVIDIA_GPU}")
            value = gpu_entries[0].get("replicas")
        elif "replicas" in value:
            value = value["replicas"]
        else:
            raise _fail(field, "time-slicing needs 'replicas'")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _fail(field, f"time-slicing replicas must be a whole number >= 1, got {value!r}")
    return value


def _mig(model: GpuModel, layout: Any, field: str) -> Partition:
    if isinstance(layout, Mapping) and "mig-devices" in layout:  # a mig-parted entry
        if layout.get("mig-enabled") is False:
            return Partition.whole()
        layout = layout["mig-devices"] or {}
    if isinstance(layout, str) and layout.strip().lower() == ALL_DISABLED:
        return Partition.whole()
    if not model.mig_capable:
        raise _fail(field, f"{model.name} does not support MIG")
    config = layout.strip().lower() if isinstance(layout, str) else "custom"
    if isinstance(layout, str) and not config.startswith("all-"):
        config = "custom"
    try:
        instances = plan_layout(model, layout)
    except PartitionError as error:
        raise _fail(field, str(error)) from None
    if config == ALL_ENABLED and instances:
        config = "custom"
    return Partition(mode=PartitionMode.MIG, instances=instances, config=config)


def partition_gpu(model: str | GpuModel, spec: Any = None, field: str = "") -> Partition:
    """A valid :class:`Partition` of one GPU of ``model`` from a spec.

    ``spec``: ``None``/``"whole"``; ``{"mig": <layout>}`` (see
    :func:`~gpuaas.supply.mig.parse_layout`; ``all-disabled`` means whole, ``all-enabled`` MIG mode
    with no instances); ``{"time-slicing": {"replicas": N}}`` or ``{"time-slicing": N}`` (also the
    device plugin's ``{"sharing": {"timeSlicing": {"resources": [...]}}}``); text ``"all-1g.10gb"``,
    ``"mig:3g.40gb,2x2g.20gb"`` or ``"time-slicing:4"``; or a :class:`Partition`, re-validated.
    ``field`` prefixes error messages (e.g. ``"nodes[3].gpus[0].partition"``).
    """
    gpu = model if isinstance(model, GpuModel) else lookup(model)
    if spec is None:
        return Partition.whole()
    if isinstance(spec, Partition):
        return validate_partition(gpu, spec, field)
    if isinstance(spec, str):
        text = spec.strip()
        if text.lower() in _WHOLE:
            return Partition.whole()
        match = _TS_TEXT.fullmatch(text)
        if match:
            return Partition.time_sliced(_replicas(int(match[1]), field))
        match = _MPS_TEXT.fullmatch(text)
        if match:
            return Partition.mps(_replicas(int(match[1]), field))
        if text.lower().startswith("mig:") or text.lower().startswith("mig="):
            return _mig(gpu, text[4:], field)
        if text.lower().startswith("all-") or "g." in text.lower():
            return _mig(gpu, text, field)
        raise _fail(
            field,
            f"unknown partition {spec!r} (use 'whole', a MIG layout such as 'all-1g.10gb', "
            "'time-slicing:4' or 'mps:4')",
        )
    if not isinstance(spec, Mapping):
        raise _fail(field, f"partition must be text or a mapping, got {spec!r}")
    if "sharing" in spec and isinstance(spec["sharing"], Mapping):
        spec = spec["sharing"]
    keys = [k for k in spec if k in ("mig", "mig.config", *_TIME_SLICING_KEYS, "mps", "mode")]
    unknown = sorted(str(k) for k in spec if k not in keys and k not in ("replicas", "layout"))
    if unknown:
        raise _fail(field, f"unknown partition key(s) {', '.join(unknown)}")
    if "mode" in spec:  # {"mode": "mig", "layout": ...} / {"mode": "time-sliced", "replicas": N}
        mode = str(spec["mode"]).strip().lower()
        if mode in _WHOLE:
            return Partition.whole()
        if mode == "mig":
            return _mig(gpu, spec.get("layout", ALL_ENABLED), field)
        if mode in _TIME_SLICING_KEYS or mode in ("time-sliced", "shared"):
            return Partition.time_sliced(_replicas(spec.get("replicas"), field))
        if mode == "mps":
            return Partition.mps(_replicas(spec.get("replicas"), field))
        raise _fail(field, f"unknown partition mode {spec['mode']!r}")
    mig_keys = [k for k in keys if k in ("mig", "mig.config")]
    ts_keys = [k for k in keys if k in _TIME_SLICING_KEYS]
    if sum(bool(k) for k in (mig_keys, ts_keys, "mps" in spec)) > 1:
        raise _fail(field, "a GPU is MIG-partitioned, time-sliced or shared by MPS: one of them")
    if mig_keys:
        return _mig(gpu, spec[mig_keys[0]], field)
    if ts_keys:
        return Partition.time_sliced(_replicas(spec[ts_keys[0]], field))
    if "mps" in spec:
        return Partition.mps(_replicas(spec["mps"], field))
    return Partition.whole()


def validate_partition(model: str | GpuModel, partition: Partition, field: str = "") -> Partition:
    """Check a ready-made partition against the model (placement table, replicas)."""
    gpu = model if isinstance(model, GpuModel) else lookup(model)
    if partition.mode is PartitionMode.MIG:
        if not gpu.mig_capable:
            raise _fail(field, f"{gpu.name} does not support MIG")
        try:
            instances = check_layout(gpu, partition.instances)
        except PartitionError as error:
            raise _fail(field, str(error)) from None
        return replace(partition, instances=instances, config=partition.config or "custom")
    if partition.shared:
        _replicas(partition.replicas, field)
    return partition


def repartition(
    node: Node, gpu_index: int, partition: Partition | Any, in_use: Set[str] = frozenset()
) -> Node:
    """A copy of ``node`` with GPU ``gpu_index`` partitioned anew.

    Refused while any device the GPU now publishes is in ``in_use`` (device names such as
    ``gpu-0-mig-1g10gb-0``, or ``<node>/<device>``): a running job would lose its device.
    """
    matches = [i for i, g in enumerate(node.gpus) if g.index == gpu_index]
    if not matches:
        indexes = ", ".join(str(g.index) for g in node.gpus) or "none"
        raise PartitionError(f"node {node.name} has no GPU {gpu_index} (GPUs: {indexes})")
    position = matches[0]
    gpu = node.gpus[position]
    busy = [name for name in device_names(gpu) if name in in_use or f"{node.name}/{name}" in in_use]
    if busy:
        raise PartitionError(
            f"cannot repartition GPU {gpu_index} of node {node.name}: device(s) "
            f"{', '.join(busy)} in use; drain them first"
        )
    new_partition = partition_gpu(gpu.model, partition, field=f"node {node.name} GPU {gpu_index}")
    gpus: list[GPU] = list(node.gpus)
    gpus[position] = replace(gpu, partition=new_partition)
    return replace(
        node,
        gpus=gpus,
        labels=dict(node.labels),
        taints=list(node.taints),
        extra=dict(node.extra),
    )


def gpu_resources(gpu: GPU) -> ResourceList:
    """Extended resources one GPU contributes (mixed MIG strategy; sharing multiplies)."""
    partition = gpu.partition
    if partition.mode is PartitionMode.MIG:
        return {mig_resource(p): n for p, n in layout_counts(partition.instances).items()}
    if partition.shared:
        return {NVIDIA_GPU: partition.replicas}
    return {NVIDIA_GPU: 1}


def advertised_resources(node: Node) -> ResourceList:
    """Allocatable resources as the kubelet shows them with the GPU operator installed.

    CPU in milli-cores, memory in bytes, ``extra`` as given; ``nvidia.com/gpu`` is present (maybe 0)
    on every GPU node; each NIC pool's VFs, as the SR-IOV or RDMA device plugin advertises them.
    """
    out: ResourceList = {CPU: node.cpu_milli, MEMORY: node.memory_bytes}
    out.update(node.extra)
    out.update(nic_resources(node))
    if node.gpus:
        out[NVIDIA_GPU] = 0
    for gpu in node.gpus:
        for name, amount in gpu_resources(gpu).items():
            out[name] = out.get(name, 0) + amount
    return out


_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]+")


def label_value(text: str) -> str:
    """``text`` made a valid Kubernetes label value (<= 63 chars, alphanumeric at both ends)."""
    value = _LABEL_VALUE_BAD.sub("-", text)[:63]
    return value.strip("-_.")


def mig_config(node: Node) -> str:
    """mig-manager's ``nvidia.com/mig.config``: the shared named config, else ``custom``."""
    configs = {
        (gpu.partition.config or "custom")
        if gpu.partition.mode is PartitionMode.MIG
        else ALL_DISABLED
        for gpu in node.gpus
        if lookup(gpu.model).mig_capable
    }
    if not configs:
        return ""
    if len(configs) == 1:
        return configs.pop()
    return "custom"


def node_labels(node: Node) -> dict[str, str]:
    """The node's labels plus topology, NFD and GFD/mig-manager labels for its GPUs.

    GFD labels a node from its GPUs: product of the first GPU (``-SHARED`` appended when
    time-sliced, as GFD does), total count, memory in MiB, family and compute capability,
    sharing, and per MIG profile the count, memory and slices.
    """
    labels = dict(node.labels)
    labels.update(node.topology.labels())
    labels.setdefault("kubernetes.io/hostname", node.name)
    if not node.gpus:
        return labels
    gpus = sorted(node.gpus, key=lambda g: g.index)
    first = gpus[0]
    model = lookup(first.model)
    shared = [g for g in gpus if g.partition.shared]
    mps = any(g.partition.mode is PartitionMode.MPS for g in shared)
    product = model.product + ("-SHARED" if shared else "")
    labels.update(
        {
            "feature.node.kubernetes.io/pci-10de.present": "true",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/gpu.product": label_value(product),
            "nvidia.com/gpu.count": str(len(gpus)),
            "nvidia.com/gpu.family": model.family,
            "nvidia.com/gpu.mode": "compute",
            "nvidia.com/gpu.replicas": str(max((g.partition.replicas for g in shared), default=1)),
            "nvidia.com/gpu.sharing-strategy": ("mps" if mps else "time-slicing")
            if shared
            else "none",
            "nvidia.com/mig.capable": "true" if model.mig_capable else "false",
            "nvidia.com/mps.capable": "true" if mps else "false",
        }
    )
    if model.generic:  # what GFD said about a model the catalogue lacks beats "unknown"
        for key in ("nvidia.com/gpu.family", "nvidia.com/mig.capable"):
            if node.labels.get(key):
                labels[key] = node.labels[key]
    memory = first.memory_mib or model.memory_mib
    if memory:  # unknown for generic models: no label rather than a misleading 0
        labels["nvidia.com/gpu.memory"] = str(memory)
    if not model.generic:
        major, minor = model.compute_capability
        labels["nvidia.com/gpu.compute.major"] = str(major)
        labels["nvidia.com/gpu.compute.minor"] = str(minor)
    config = mig_config(node)
    if config:
        labels["nvidia.com/mig.config"] = config
        labels["nvidia.com/mig.config.state"] = "success"
        labels["nvidia.com/mig.strategy"] = MIG_STRATEGY
    else:
        labels["nvidia.com/mig.strategy"] = "none"
    counts: dict[str, int] = {}
    for gpu in gpus:
        if gpu.partition.mode is PartitionMode.MIG:
            for profile, n in layout_counts(gpu.partition.instances).items():
                counts[profile] = counts.get(profile, 0) + n
    for profile_name, count in sorted(counts.items()):
        key = mig_resource(profile_name)  # GFD's label prefix is the resource name
        labels[f"{key}.count"] = str(count)
        if model.mig_capable:
            profile = model.mig_profile(profile_name)
            labels[f"{key}.memory"] = str(profile.memory_mib)
            labels[f"{key}.slices.gi"] = str(profile.compute_slices)
            labels[f"{key}.slices.ci"] = str(profile.compute_slices)
    return labels


def parse_mig_config_label(model: str | GpuModel, value: str) -> Partition:
    """The partition a ``nvidia.com/mig.config`` label value stands for (named configs only)."""
    gpu = model if isinstance(model, GpuModel) else lookup(model)
    name = value.strip().lower()
    if name in ("", ALL_DISABLED):
        return Partition.whole()
    if name == "custom":
        raise PartitionError("mig.config 'custom' does not say the layout; give it explicitly")
    if not name.startswith("all-"):
        raise PartitionError(f"unknown mig.config {value!r}")
    parse_layout(name, gpu)  # clear error for a profile the model lacks
    return _mig(gpu, name, "")
