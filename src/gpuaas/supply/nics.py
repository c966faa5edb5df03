"""RDMA / SR-IOV NICs in the supply plane: how they are read, published and related to GPUs.

One NIC is written the same way wherever it comes from (an inventory's ``nics:``, the
``gpuaas.io/nics`` annotation of a Kubernetes Node, a stored node spec)::

    {name: mlx5_0, pool: nvidia.com/rdma_ib, link: infiniband, speed: 400, rdma: true,
     vfs: 8, pcieRoot: pci0000:15, numaNode: 0, rail: rail-0, fabric: ib-a,
     pciAddress: "0000:17:00.0"}

``name`` and ``pool`` are required; ``link`` defaults to infiniband, ``rdma`` to true, ``vfs``
to 1 (the NIC whole). :func:`read_nic` checks each key and names the field it refuses.

Published devices. Each NIC is one DRA device of the ``nic.gpuaas.io`` driver beside the
GPUs' ``gpu.nvidia.com`` devices, named ``nic-<name>`` (``mlx5_0`` -> ``nic-mlx5-0``, a DNS
label), with the attributes ``name``, ``pool``, ``link``, ``speed`` (Gb/s), ``rdma``,
``numaNode``, ``rail``, ``fabric``, ``pciAddress`` and the standard
``resource.kubernetes.io/pcieRoot`` (which GPUs carry too, so a claim can ``matchAttribute`` it
across both), and the capacity ``vfs``. Unknown values are left out rather than published
empty, so a selector such as ``device.attributes["nic.gpuaas.io"].rail == "rail-0"`` simply
does not match a NIC without a rail.

Topology. A GPU and a NIC are *PCIe-aligned* when they hang off the same PCIe root (switch),
*NUMA-aligned* when they only share a NUMA node; :func:`nic_affinity` lists, per NIC, the GPUs
of each kind, which the fleet API and ``gpuaas nodes get`` show. The engine's alignment rule
(placement) reads the same two relations through :func:`alignment_of`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpuaas.model.devices import GPU, Device
from gpuaas.model.document import at, integer, mapping, shown
from gpuaas.model.document import text as document_text
from gpuaas.model.errors import InvalidValue
from gpuaas.model.network import LinkType, Nic
from gpuaas.model.node import Node
from gpuaas.model.quantity import Quantity
from gpuaas.model.resources import MIG_PREFIX, NVIDIA_GPU, SHARED_GPU, ResourceList

NIC_DRIVER = "nic.gpuaas.io"
#: Kubernetes' standard attribute for the PCIe root complex (KEP-4381), published by GPUs and
#: NICs alike.
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
#: The keys of one NIC, in the order they are written back.
NIC_KEYS = (
    "name",
    "pool",
    "link",
    "speed",
    "rdma",
    "vfs",
    "pcieRoot",
    "numaNode",
    "rail",
    "fabric",
    "pciAddress",
)
#: Attribute names a NIC device may carry (CEL selectors are checked against them).
NIC_ATTRIBUTE_NAMES: frozenset[str] = frozenset(
    {"name", "pool", "link", "speed", "rdma", "numaNode", "rail", "fabric", "pciAddress"}
)
NIC_CAPACITY_NAMES: frozenset[str] = frozenset({"vfs"})
MAX_VFS = 256  # ConnectX-7 allows up to 127 VFs per PF; a shared RDMA device up to ~1000 pods
MAX_SHARED = 10_000  # rdma-shared-dev-plugin's rdmaHcaMax
MAX_NICS_PER_NODE = 64
MAX_SPEED_GBPS = 10_000
MAX_NUMA_NODES = 64

_NIC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,62}$")
_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_DNS_PART = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_RESOURCE_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_TOPOLOGY_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.:]{0,61}[A-Za-z0-9])?$")


def pool_problem(pool: str) -> str | None:
    """Why ``pool`` cannot name a NIC pool's extended resource (``domain/name``), or None."""
    domain, slash, name = pool.partition("/")
    if not slash or not domain or len(domain) > 253 or not _DNS_PART.fullmatch(domain):
        return (
            f"{pool!r} is not an extended resource name: expected domain/name such as "
            "'openshift.io/mlnx_ib', 'nvidia.com/rdma_ib' or 'rdma/hca_shared'"
        )
    if not _RESOURCE_NAME.fullmatch(name):
        return f"{pool!r}: the name after '/' must be 1-63 letters, digits, '-', '_' or '.'"
    if pool in (NVIDIA_GPU, SHARED_GPU) or pool.startswith(MIG_PREFIX):
        return f"{pool!r} is a GPU resource, not a NIC pool"
    return None


def _pool(value: object, where: str) -> str:
    pool = document_text(value, where)
    problem = pool_problem(pool)
    if problem:
        raise InvalidValue(where, problem)
    return pool


def topology_text(value: object, where: str) -> str:
    text = document_text(value, where, numbers=True)
    if not _TOPOLOGY_VALUE.fullmatch(text):
        raise InvalidValue(
            where,
            f"{text!r} is invalid (1-63 letters, digits, '-', '_', '.' or ':', "
            "starting and ending with a letter or digit)",
        )
    return text


def link_of(value: object, where: str) -> LinkType:
    text = document_text(value, where).lower()
    aliases = {"ib": "infiniband", "eth": "ethernet", "rocev2": "roce"}
    try:
        return LinkType(aliases.get(text, text))
    except ValueError:
        known = ", ".join(link.value for link in LinkType)
        raise InvalidValue(where, f"must be one of {known}, got {value!r}") from None


def read_nic(raw: object, where: str, *, max_vfs: int = MAX_SHARED) -> Nic:
    """One NIC in the form of the module docstring; InvalidValue names the field."""
    spec = mapping(raw, where, NIC_KEYS, optional=False)
    for key in ("name", "pool"):
        if key not in spec:
            raise InvalidValue(at(where, key), "is required")
    name = document_text(spec["name"], at(where, "name"), numbers=True)
    if not _NIC_NAME.fullmatch(name):
        raise InvalidValue(
            at(where, "name"),
            f"{name!r} is not a NIC name (1-63 letters, digits, '_', '-', '.' or ':', "
            "as the RDMA device or netdev is called, e.g. mlx5_0)",
        )
    nic = Nic(name=name, pool=_pool(spec["pool"], at(where, "pool")))
    fields: dict[str, Any] = {}
    if "link" in spec:
        fields["link"] = link_of(spec["link"], at(where, "link"))
    if "speed" in spec:
        fields["speed_gbps"] = integer(spec["speed"], at(where, "speed"), 1, MAX_SPEED_GBPS)
    if "rdma" in spec:
        if not isinstance(spec["rdma"], bool):
            raise InvalidValue(
                at(where, "rdma"), f"expected true or false, got {shown(spec['rdma'])}"
            )
        fields["rdma"] = spec["rdma"]
    if "vfs" in spec:
        fields["vfs"] = integer(spec["vfs"], at(where, "vfs"), 1, max_vfs)
    if "pcieRoot" in spec:
        fields["pcie_root"] = topology_text(spec["pcieRoot"], at(where, "pcieRoot"))
    if "numaNode" in spec:
        fields["numa_node"] = integer(spec["numaNode"], at(where, "numaNode"), 0, MAX_NUMA_NODES)
    for key, attr in (("rail", "rail"), ("fabric", "fabric")):
        if key in spec:
            fields[attr] = topology_text(spec[key], at(where, key))
    if "pciAddress" in spec:
        address = document_text(spec["pciAddress"], at(where, "pciAddress"))
        if not _PCI_ADDRESS.fullmatch(address):
            raise InvalidValue(
                at(where, "pciAddress"),
                f"{address!r} is not a PCI address (domain:bus:device.function, e.g. 0000:17:00.0)",
            )
        fields["pci_address"] = address.lower()
    if fields.get("link") is LinkType.ETHERNET and "rdma" not in spec:
        fields["rdma"] = False  # plain Ethernet: RDMA only when said (RoCE is its own link)
    return replace(nic, **fields)


def check_nics(nics: list[Nic], where: str, gpus: list[GPU] | None = None) -> None:
    """Refuse duplicate NIC names or PCI addresses, and a pool offered as two link types."""
    if len(nics) > MAX_NICS_PER_NODE:
        raise InvalidValue(where, f"at most {MAX_NICS_PER_NODE} NICs per node, got {len(nics)}")
    names: dict[str, int] = {}
    addresses: dict[str, int] = {}
    links: dict[str, LinkType] = {}
    for number, nic in enumerate(nics):
        if nic.name in names:
            raise InvalidValue(
                f"{where}[{number}].name", f"{nic.name!r} is already NIC {names[nic.name]}"
            )
        names[nic.name] = number
        if nic.pci_address:
            if nic.pci_address in addresses:
                raise InvalidValue(
                    f"{where}[{number}].pciAddress",
                    f"{nic.pci_address} is already NIC {addresses[nic.pci_address]}'s",
                )
            addresses[nic.pci_address] = number
        if links.setdefault(nic.pool, nic.link) is not nic.link:
            raise InvalidValue(
                f"{where}[{number}].link",
                f"pool {nic.pool} is already {links[nic.pool]}; one pool is one link type",
            )


def nic_entry(nic: Nic) -> dict[str, Any]:
    """``nic`` written back in the form :func:`read_nic` reads (defaults left out)."""
    out: dict[str, Any] = {"name": nic.name, "pool": nic.pool}
    if nic.link is not LinkType.INFINIBAND:
        out["link"] = nic.link.value
    if nic.speed_gbps:
        out["speed"] = nic.speed_gbps
    if nic.rdma is not (nic.link is not LinkType.ETHERNET):
        out["rdma"] = nic.rdma
    if nic.vfs != 1:
        out["vfs"] = nic.vfs
    if nic.pcie_root:
        out["pcieRoot"] = nic.pcie_root
    if nic.numa_node is not None:
        out["numaNode"] = nic.numa_node
    if nic.rail:
        out["rail"] = nic.rail
    if nic.fabric:
        out["fabric"] = nic.fabric
    if nic.pci_address:
        out["pciAddress"] = nic.pci_address
    return out


# --- resources and devices ----------------------------------------------------------------


def nic_resources(node: Node) -> ResourceList:
    """The extended resources the node's NICs advertise: each pool's VFs, summed over NICs
    (what the SR-IOV or RDMA device plugin puts in ``status.allocatable``)."""
    out: ResourceList = {}
    for nic in node.nics:
        out[nic.pool] = out.get(nic.pool, 0) + nic.vfs
    return out


def nic_device_name(nic: str) -> str:
    """``mlx5_0`` -> ``nic-mlx5-0``: a DNS label, as DRA device names must be."""
    return "nic-" + (re.sub(r"[^a-z0-9]+", "-", nic.lower()).strip("-") or "x")


def nic_devices(node: Node) -> list[Device]:
    """One ``nic.gpuaas.io`` device per NIC (see the module docstring)."""
    out = []
    for nic in node.nics:
        attributes: dict[str, str | int | bool] = {
            "name": nic.name,
            "pool": nic.pool,
            "link": nic.link.value,
            "rdma": nic.rdma,
        }
        if nic.speed_gbps:
            attributes["speed"] = nic.speed_gbps
        if nic.numa_node is not None:
            attributes["numaNode"] = nic.numa_node
        for key, value in (
            ("rail", nic.rail),
            ("fabric", nic.fabric),
            ("pciAddress", nic.pci_address),
            (PCIE_ROOT_ATTRIBUTE, nic.pcie_root),
        ):
            if value:
                attributes[key] = value
        out.append(
            Device(
                name=nic_device_name(nic.name),
                node=node.name,
                driver=NIC_DRIVER,
                kind="nic",
                gpu_index=-1,
                attributes=attributes,
                capacity={"vfs": Quantity.parse(nic.vfs)},
            )
        )
    return out


# --- topology -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NicAffinity:
    """Which GPUs of its node a NIC serves best: ``pcie`` share its PCIe root (GPUDirect RDMA
    at full speed), ``numa`` only its NUMA node (traffic crosses the CPU's root complex)."""

    nic: str
    pcie: tuple[int, ...]
    numa: tuple[int, ...]


def alignment_of(nic: Nic, gpu: GPU) -> str:
    """``pcie``, ``numa`` or ``none``: how close ``nic`` sits to ``gpu``.

    A GPU's NUMA node is taken as known only when the NIC's is (a GPU's ``numa_node``
    defaults to 0 even where nothing was said)."""
    if nic.pcie_root and gpu.pcie_root and nic.pcie_root == gpu.pcie_root:
        return "pcie"
    if nic.numa_node is not None and nic.numa_node == gpu.numa_node:
        return "numa"
    return "none"


def nic_affinity(node: Node) -> list[NicAffinity]:
    """Per NIC (in the node's order), the GPUs PCIe-aligned and those only NUMA-aligned."""
    out = []
    gpus = sorted(node.gpus, key=lambda g: g.index)
    for nic in node.nics:
        kinds = {gpu.index: alignment_of(nic, gpu) for gpu in gpus}
        out.append(
            NicAffinity(
                nic=nic.name,
                pcie=tuple(i for i, kind in kinds.items() if kind == "pcie"),
                numa=tuple(i for i, kind in kinds.items() if kind == "numa"),
            )
        )
    return out


def pools_of(nodes: list[Node] | tuple[Node, ...]) -> dict[str, list[Node]]:
    """The nodes offering each NIC pool, by pool, in the order given."""
    out: dict[str, list[Node]] = {}
    for node in nodes:
        for pool in dict.fromkeys(nic.pool for nic in node.nics):
            out.setdefault(pool, []).append(node)
    return out


def gpu_topology_entry(gpus: list[GPU]) -> Mapping[str, Any] | None:
    """Nothing to write when no GPU has a PCIe root; else the roots by GPU index."""
    roots = [g.pcie_root for g in sorted(gpus, key=lambda g: g.index)]
    return {"pcieRoots": roots} if any(roots) else None
