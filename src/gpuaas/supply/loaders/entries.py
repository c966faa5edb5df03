"""Any fleet source as inventory entries: what the service stores, whatever it was given.

The service keeps one inventory entry per node (``gpuaas.service.fleet``), so a node read from
``kubectl get nodes -o yaml`` or the trace's CSV is stored the way an inventory would have written
it. :func:`inventory_entry` writes a loaded :class:`~gpuaas.model.node.Node` as that entry;
loading the entry with the inventory loader gives the same node back (same GPUs, partitions,
memory, labels, taints, topology, extra resources and NICs), which the tests check for every source.

:func:`fleet_entries` is the one entry point for a fleet document or file text: an inventory keeps
its own entries and defaults (its groups and patterns are expanded when stored), Kubernetes Node
objects and CSV rows are loaded and written back as entries.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from os import PathLike
from typing import Any

from gpuaas.model.devices import GPU, Partition, PartitionMode
from gpuaas.model.node import Node
from gpuaas.supply.catalogue import lookup
from gpuaas.supply.loaders._common import HOSTNAME_LABEL
from gpuaas.supply.loaders.errors import FleetFileError
from gpuaas.supply.loaders.inventory import looks_like_inventory
from gpuaas.supply.loaders.kubernetes import looks_like_kubernetes, nodes_from_document
from gpuaas.supply.mig import layout_counts
from gpuaas.supply.nics import nic_entry

_TOPOLOGY = (
    ("zone", "zone"),
    ("block", "block"),
    ("rack", "rack"),
    ("nvlinkDomain", "nvlink_domain"),
)


def partitioning_spec(partition: Partition) -> Any:
    """A partition in the inventory's ``partitioning`` form."""
    if partition.mode is PartitionMode.MIG:
        if partition.config.startswith("all-"):
            return {"mig": partition.config}
        return {"mig": layout_counts(partition.instances)}
    if partition.mode is PartitionMode.TIME_SLICED:
        return {"timeSlicing": {"replicas": partition.replicas}}
    if partition.mode is PartitionMode.MPS:
        return {"mps": {"replicas": partition.replicas}}
    return "whole"


def _numa_nodes(gpus: list[GPU]) -> int | None:
    """``numaNodes`` that spreads the GPUs as they are, or None when they are all on node 0."""
    count = max(gpu.numa_node for gpu in gpus) + 1
    if count == 1:
        return None
    if all(gpu.numa_node == gpu.index * count // len(gpus) for gpu in gpus):
        return count
    raise FleetFileError(
        "", "GPUs spread over NUMA nodes in a way the inventory cannot write", field="gpus"
    )


def _gpus(node: Node) -> dict[str, Any]:
    gpus = sorted(node.gpus, key=lambda g: g.index)
    if [g.index for g in gpus] != list(range(len(gpus))):
        raise FleetFileError("", "GPU indices must run 0..N-1", entry=node.name, field="gpus")
    models = {g.model for g in gpus}
    if len(models) > 1:
        raise FleetFileError(
            "", f"GPUs of several models ({', '.join(sorted(models))})", entry=node.name
        )
    name = gpus[0].model
    out: dict[str, Any] = {"model": name, "count": len(gpus)}
    memory = {g.memory_mib for g in gpus}
    if len(memory) == 1 and (mib := memory.pop()) and mib != lookup(name).memory_mib:
        out["memory"] = f"{mib}Mi"
    specs = [partitioning_spec(g.partition) for g in gpus]
    keys = [repr(spec) for spec in specs]
    common, _ = Counter(keys).most_common(1)[0]
    base = specs[keys.index(common)]
    if base != "whole":
        out["partitioning"] = base
    others: dict[str, list[int]] = {}
    for index, key in enumerate(keys):
        if key != common:
            others.setdefault(key, []).append(index)
    if others:
        out["perGpu"] = [
            {"indices": indices, "partitioning": specs[indices[0]]} for indices in others.values()
        ]
    numa = _numa_nodes(gpus)
    if numa is not None:
        out["numaNodes"] = numa
    if any(g.pcie_root for g in gpus):
        out["pcieRoots"] = [g.pcie_root for g in gpus]
    return out


def inventory_entry(node: Node) -> dict[str, Any]:
    """``node`` as a one-node inventory entry (see the module docstring)."""
    entry: dict[str, Any] = {
        "name": node.name,
        "cpu": f"{node.cpu_milli}m",
        "memory": node.memory_bytes,
    }
    if node.gpus:
        entry["gpus"] = _gpus(node)
    topology = {key: getattr(node.topology, attr) for key, attr in _TOPOLOGY}
    topology = {key: value for key, value in topology.items() if value}
    if topology:
        entry["topology"] = topology
    labels = dict(node.labels)
    if labels.get(HOSTNAME_LABEL, node.name) != node.name:
        labels.pop(HOSTNAME_LABEL)  # a stored node's hostname label is its name
    if labels:
        entry["labels"] = labels
    if node.taints:
        entry["taints"] = [
            {"key": t.key, "effect": str(t.effect)} | ({"value": t.value} if t.value else {})
            for t in node.taints
        ]
    if node.extra:
        entry["resources"] = dict(node.extra)
    if node.nics:
        entry["nics"] = [nic_entry(nic) for nic in node.nics]
    if node.dcgm_exporter:
        entry["telemetry"] = {"dcgmExporter": node.dcgm_exporter}
    return entry


def fleet_entries(
    document: object, source: str | PathLike[str]
) -> tuple[list[Any], dict[str, Any] | None]:
    """(entries, defaults) of a parsed fleet document: a gpuaas inventory as written, Kubernetes
    Node objects as loaded. Errors are :class:`FleetFileError` naming ``source``."""
    if looks_like_inventory(document):
        assert isinstance(document, Mapping)
        entries = document.get("nodes")
        if not isinstance(entries, list) or not entries:
            raise FleetFileError(source, "expected a non-empty list of nodes", field="nodes")
        defaults = document.get("defaults")
        return list(entries), dict(defaults) if isinstance(defaults, Mapping) else defaults
    if looks_like_kubernetes(document):
        return nodes_entries(nodes_from_document(document, source).nodes, source), None
    kind = document.get("kind") if isinstance(document, Mapping) else None
    raise FleetFileError(
        source,
        "not a fleet: expected a gpuaas inventory (apiVersion: gpuaas.io/v1, kind: Fleet) or "
        "kubectl get nodes output (kind: Node, NodeList or List)"
        + (f"; got kind {kind!r}" if kind else ""),
    )


def nodes_entries(nodes: list[Node], source: str | PathLike[str]) -> list[dict[str, Any]]:
    """Loaded nodes as inventory entries; a node the inventory cannot write names itself."""
    out = []
    for number, node in enumerate(nodes):
        try:
            out.append(inventory_entry(node))
        except FleetFileError as exc:
            raise FleetFileError(
                source, exc.problem, entry=f"node {number} ({node.name})", field=exc.field
            ) from None
    return out
