"""A fleet in numbers: what ``gpuaas fleet show`` prints, as plain JSON-ready data.

It lives beside the loaders (not in the CLI) so that the service and the dashboard can report the
same figures the command line does.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpuaas.model.devices import PartitionMode
from gpuaas.model.node import Fleet
from gpuaas.model.resources import CPU, MEMORY, NVIDIA_GPU
from gpuaas.supply.catalogue import lookup
from gpuaas.supply.devices import publish_devices
from gpuaas.supply.loaders._common import SOURCE_MODEL_LABEL
from gpuaas.supply.mig import layout_counts
from gpuaas.supply.partition import advertised_resources

_KIND_ORDER = {"gpu": 0, "mig": 1, "shared": 2}

#: Summary key -> Topology attribute, outermost first.
TOPOLOGY_LEVELS: tuple[tuple[str, str], ...] = (
    ("zones", "zone"),
    ("blocks", "block"),
    ("racks", "rack"),
    ("nvlink_domains", "nvlink_domain"),
)


def _ranked(counter: Counter[str]) -> dict[str, int]:
    """Largest first, then by name, so output is stable."""
    return dict(sorted(counter.items(), key=lambda item: (-item[1], item[0])))


def _by_number(counter: Counter[int]) -> dict[str, int]:
    return {str(key): counter[key] for key in sorted(counter)}


def summarize_fleet(fleet: Fleet, *, devices: bool = True) -> dict[str, Any]:
    """Counts of nodes, GPUs, partitions, topology domains, advertised resources and devices.

    ``gpus_by_model`` uses each source's own model names (the trace's ``V100M32``, a node's
    ``nvidia.com/gpu.product``); ``gpus_by_catalogue_model`` the catalogue's. Amounts are
    canonical integers: CPU in milli-cores, memory in bytes, devices as counts.
    """
    by_source: Counter[str] = Counter()
    by_catalogue: Counter[str] = Counter()
    models: dict[tuple[str, str], dict[str, Any]] = {}
    nodes_by_gpu_count: Counter[int] = Counter()
    whole = 0
    mig_gpus = 0
    mig_layouts: Counter[str] = Counter()
    mig_instances: Counter[str] = Counter()
    shared_gpus = 0
    shared_replicas = 0
    shared_by_replicas: Counter[int] = Counter()
    mps_gpus = 0
    mps_replicas = 0
    mps_by_replicas: Counter[int] = Counter()
    domains: dict[str, dict[str, dict[str, int]]] = {key: {} for key, _ in TOPOLOGY_LEVELS}
    resources: Counter[str] = Counter()
    device_kinds: Counter[str] = Counter()
    device_types: Counter[tuple[str, str, str]] = Counter()
    taints: Counter[str] = Counter()
    for node in fleet.nodes:
        gpu_count = len(node.gpus)
        nodes_by_gpu_count[gpu_count] += 1
        seen_models: set[tuple[str, str]] = set()
        for gpu in node.gpus:
            source_name = node.labels.get(SOURCE_MODEL_LABEL) or gpu.model
            by_source[source_name] += 1
            by_catalogue[gpu.model] += 1
            key = (source_name, gpu.model)
            if key not in models:
                catalogued = lookup(gpu.model)
                models[key] = {
                    "name": source_name,
                    "catalogue_name": gpu.model,
                    "generic": catalogued.generic,
                    "memory_mib": gpu.memory_mib,
                    "mig_capable": catalogued.mig_capable,
                    "nodes": 0,
                    "gpus": 0,
                }
            models[key]["gpus"] += 1
            if key not in seen_models:
                seen_models.add(key)
                models[key]["nodes"] += 1
            partition = gpu.partition
            if partition.mode is PartitionMode.MIG:
                mig_gpus += 1
                mig_layouts[f"{gpu.model} {partition.describe()}"] += 1
                mig_instances.update(layout_counts(partition.instances))
            elif partition.mode is PartitionMode.MPS:
                mps_gpus += 1
                mps_replicas += partition.replicas
                mps_by_replicas[partition.replicas] += 1
            elif partition.mode is PartitionMode.TIME_SLICED:
                shared_gpus += 1
                shared_replicas += partition.replicas
                shared_by_replicas[partition.replicas] += 1
            else:
                whole += 1
        for key, attribute in TOPOLOGY_LEVELS:
            name = getattr(node.topology, attribute)
            if name:
                domain = domains[key].setdefault(name, {"nodes": 0, "gpus": 0})
                domain["nodes"] += 1
                domain["gpus"] += gpu_count
        resources.update(advertised_resources(node))
        for taint in node.taints:
            taints[
                f"{taint.key}={taint.value}:{taint.effect}"
                if taint.value
                else f"{taint.key}:{taint.effect}"
            ] += 1
        if devices:
            for device in publish_devices(node):
                device_kinds[device.kind] += 1
                kind_key = (
                    device.kind,
                    str(device.attributes.get("productName", "")),
                    str(device.attributes.get("profile", "")),
                )
                device_types[kind_key] += 1
    gpus = sum(by_catalogue.values())
    ordered_resources = {CPU: resources.pop(CPU, 0), MEMORY: resources.pop(MEMORY, 0)}
    if NVIDIA_GPU in resources:
        ordered_resources[NVIDIA_GPU] = resources.pop(NVIDIA_GPU)
    ordered_resources.update(dict(sorted(resources.items())))
    summary: dict[str, Any] = {
        "source": fleet.source,
        "nodes": len(fleet.nodes),
        "gpu_nodes": sum(1 for node in fleet.nodes if node.gpus),
        "gpus": gpus,
        "gpus_by_model": _ranked(by_source),
        "gpus_by_catalogue_model": _ranked(by_catalogue),
        "models": sorted(models.values(), key=lambda m: (-m["gpus"], m["name"])),
        "nodes_by_gpu_count": _by_number(nodes_by_gpu_count),
        "cpu_milli": sum(node.cpu_milli for node in fleet.nodes),
        "memory_bytes": sum(node.memory_bytes for node in fleet.nodes),
        "partitions": {
            "whole": whole,
            "mig": {
                "gpus": mig_gpus,
                "layouts": _ranked(mig_layouts),
                "instances": _ranked(mig_instances),
            },
            "time_sliced": {
                "gpus": shared_gpus,
                "replicas": shared_replicas,
                "gpus_by_replicas": _by_number(shared_by_replicas),
            },
            "mps": {
                "gpus": mps_gpus,
                "replicas": mps_replicas,
                "gpus_by_replicas": _by_number(mps_by_replicas),
            },
        },
        "topology": {key: dict(sorted(values.items())) for key, values in domains.items()},
        "taints": _ranked(taints),
        "resources": ordered_resources,
    }
    if devices:
        summary["devices"] = {
            "total": sum(device_kinds.values()),
            "by_kind": _ranked(device_kinds),
            "by_type": [
                {"kind": kind, "product": product, "profile": profile, "devices": count}
                for (kind, product, profile), count in sorted(
                    device_types.items(),
                    key=lambda item: (_KIND_ORDER.get(item[0][0], 3), -item[1], item[0]),
                )
            ],
        }
    return summary
