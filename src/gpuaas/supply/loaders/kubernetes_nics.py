"""A Kubernetes Node's RDMA / SR-IOV NICs, from its allocatable, its annotations and NFD labels.

Pools. A device plugin advertises a pool of NIC devices as an extended resource whose amount is
how many pods can hold one at a time:

* ``openshift.io/<pool>``: the SR-IOV network device plugin (SR-IOV network operator,
  OpenShift's default resource prefix): that many virtual functions;
* ``nvidia.com/<pool>``: the same plugins configured by NVIDIA's network operator with the
  ``nvidia.com`` prefix (``nvidia.com/rdma_ib``, ``nvidia.com/sriov_roce``,
  ``nvidia.com/rdma_shared_device_a``). Only names that speak of a NIC count (``rdma``,
  ``sriov``, ``roce``, ``hca``, ``mlnx``, ``mlx`` or an ``ib`` word); GPU resources
  (``nvidia.com/gpu``, ``mig-*``, ``gpu.shared``, HAMi's ``gpucores``) never do;
* ``rdma/<pool>``: Mellanox's k8s-rdma-shared-dev-plugin, an RDMA device shared by up to
  ``rdmaHcaMax`` pods (often ``1k``): each pod's share counts as one "VF".

Layout. What allocatable cannot say (how the pool's VFs split over physical NICs, each NIC's
PCIe root, NUMA node, rail, speed) comes from the annotation ``gpuaas.io/nics``, a JSON list of
NICs in the inventory's form (docs/networks.md), which an operator or a node agent sets
(``kubectl annotate node``); ``gpuaas.io/gpu-topology`` gives each GPU's PCIe root and NUMA node,
a JSON list by GPU index (``[{"pcieRoot": "pci0000:15", "numaNode": 0}, ...]``). The annotation
describes the hardware and allocatable what the kubelet offers now: a pool the annotation names
must be in allocatable (else the NIC pool does not exist, refused naming the field); when
allocatable offers fewer VFs than the NICs have (unhealthy VFs), the last NICs of the pool give
up the difference; when it offers more, the annotation misses a NIC and is refused.

Without the annotation each pool is one NIC named after the pool (``openshift.io/mlnx_ib`` ->
``mlnx_ib``) holding all its VFs, with no topology (so alignment cannot be required on that
node). Its link type comes from the pool's name (an ``ib``/``infiniband``/``ipoib`` word:
InfiniBand; ``roce``: RoCE; ``eth``: Ethernet, RoCE when RDMA), else from NFD's PCI labels
(``feature.node.kubernetes.io/pci-0207_<vendor>.present``, class 0207 being an InfiniBand
controller, 0200 an Ethernet one); it is RDMA-capable when the plugin is an RDMA one
(``rdma/``, an ``nvidia.com`` rdma pool), the link is InfiniBand or RoCE, or NFD says
``feature.node.kubernetes.io/rdma.capable`` / ``rdma.available``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import replace

from gpuaas.model.devices import GPU
from gpuaas.model.document import integer, mapping, sequence
from gpuaas.model.errors import InvalidValue
from gpuaas.model.network import LinkType, Nic
from gpuaas.supply.nics import MAX_NUMA_NODES, MAX_SHARED, check_nics, read_nic, topology_text

NICS_ANNOTATION = "gpuaas.io/nics"
GPU_TOPOLOGY_ANNOTATION = "gpuaas.io/gpu-topology"
NFD = "feature.node.kubernetes.io/"
NFD_SRIOV = NFD + "network-sriov.capable"
NFD_RDMA = (NFD + "rdma.capable", NFD + "rdma.available")
#: ``pci-<class>_<vendor>.present``, ``pci-<vendor>.present`` (NFD's deviceLabelFields)
_NFD_PCI = re.compile(
    r"^feature\.node\.kubernetes\.io/pci-(?:(?P<cls>[0-9a-f]{4})_)?(?P<vendor>[0-9a-f]{4})"
    r"\.(?:present|sriov\.capable)$"
)
_INFINIBAND_CLASS = "0207"
_ETHERNET_CLASS = "0200"
_NIC_WORDS = re.compile(r"rdma|sriov|roce|hca|mlnx|mlx|(?:^|[_.-])ib(?:[_.-]|$)")
_IB_WORDS = re.compile(r"(?:^|[_.-])(?:ib|infiniband)(?:[_.-]|\d|$)|ipoib")
_ETH_WORDS = re.compile(r"(?:^|[_.-])(?:eth|ethernet|en)(?:[_.-]|\d|$)")
_TRUE = ("true", "1", "yes")


def is_nic_pool(resource: str) -> bool:
    """Whether ``resource`` is a NIC pool of an SR-IOV or RDMA device plugin (see above)."""
    domain, slash, name = resource.partition("/")
    if not slash:
        return False
    if domain in ("openshift.io", "rdma"):
        return True
    return domain == "nvidia.com" and bool(_NIC_WORDS.search(name.lower()))


def nic_pools(amounts: Mapping[str, int], where: str) -> dict[str, int]:
    """The NIC pools in a node's allocatable, with their amounts (0 left out)."""
    out = {}
    for resource, amount in amounts.items():
        if is_nic_pool(resource) and amount > 0:
            if amount > MAX_SHARED:
                raise InvalidValue(
                    f"{where}.{resource}", f"{amount} is implausible for one node's NIC pool"
                )
            out[resource] = amount
    return out


def _json(annotations: Mapping[str, str], key: str) -> list[object] | None:
    text = annotations.get(key)
    if text is None:
        return None
    where = f"metadata.annotations.{key}"
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidValue(where, f"is not JSON ({exc.msg} at character {exc.pos})") from None
    return sequence(value, where, optional=False)


def gpu_topology(gpus: list[GPU], annotations: Mapping[str, str]) -> list[GPU]:
    """``gpus`` with the PCIe roots and NUMA nodes of ``gpuaas.io/gpu-topology``, if given."""
    items = _json(annotations, GPU_TOPOLOGY_ANNOTATION)
    if items is None:
        return gpus
    where = f"metadata.annotations.{GPU_TOPOLOGY_ANNOTATION}"
    if len(items) != len(gpus):
        raise InvalidValue(where, f"describes {len(items)} GPUs, the node has {len(gpus)}")
    out = []
    for gpu, item in zip(sorted(gpus, key=lambda g: g.index), items, strict=True):
        at = f"{where}[{gpu.index}]"
        entry = mapping(item, at, ("pcieRoot", "numaNode"), optional=False)
        root = gpu.pcie_root
        if "pcieRoot" in entry:
            root = topology_text(entry["pcieRoot"], f"{at}.pcieRoot")
        numa = gpu.numa_node
        if "numaNode" in entry:
            numa = integer(entry["numaNode"], f"{at}.numaNode", 0, MAX_NUMA_NODES)
        out.append(replace(gpu, pcie_root=root, numa_node=numa))
    return out


def _nfd(labels: Mapping[str, str]) -> tuple[set[str], bool]:
    """(PCI device classes NFD saw on NIC vendors, whether NFD says the node can do RDMA)."""
    classes = set()
    for key, value in labels.items():
        match = _NFD_PCI.fullmatch(key)
        if match and value.strip().lower() in _TRUE and match["cls"]:
            classes.add(match["cls"])
    rdma = any(labels.get(key, "").strip().lower() in _TRUE for key in NFD_RDMA)
    return classes, rdma


def _guessed(pool: str, amount: int, labels: Mapping[str, str], taken: set[str]) -> Nic:
    """One NIC holding all of ``pool``'s ``amount`` VFs (see the module docstring)."""
    domain, _, name = pool.partition("/")
    word = name.lower()
    classes, nfd_rdma = _nfd(labels)
    rdma_plugin = domain == "rdma" or (domain == "nvidia.com" and "rdma" in word)
    if _IB_WORDS.search(word):
        link = LinkType.INFINIBAND
    elif "roce" in word:
        link = LinkType.ROCE
    elif _ETH_WORDS.search(word):
        link = LinkType.ROCE if (rdma_plugin or nfd_rdma) else LinkType.ETHERNET
    elif _INFINIBAND_CLASS in classes and _ETHERNET_CLASS not in classes:
        link = LinkType.INFINIBAND
    elif rdma_plugin or nfd_rdma:
        link = LinkType.ROCE
    else:
        link = LinkType.ETHERNET
    rdma = rdma_plugin or nfd_rdma or link is not LinkType.ETHERNET
    nic_name = name
    if nic_name in taken:
        nic_name = f"{domain}-{name}".replace(".", "-")
    return Nic(name=nic_name, pool=pool, link=link, rdma=rdma, vfs=amount)


def node_nics(
    pools: Mapping[str, int], labels: Mapping[str, str], annotations: Mapping[str, str]
) -> list[Nic]:
    """The node's NICs: the annotated ones (trimmed to allocatable), then one guessed NIC per
    pool the annotation does not describe."""
    where = f"metadata.annotations.{NICS_ANNOTATION}"
    items = _json(annotations, NICS_ANNOTATION) or []
    nics = [read_nic(item, f"{where}[{n}]") for n, item in enumerate(items)]
    check_nics(nics, where)
    declared: dict[str, int] = {}
    for number, nic in enumerate(nics):
        if nic.pool not in pools:
            offered = ", ".join(sorted(pools)) or "none"
            raise InvalidValue(
                f"{where}[{number}].pool",
                f"no such NIC pool: {nic.pool} is not in the node's allocatable "
                f"(NIC pools it offers: {offered})",
            )
        declared[nic.pool] = declared.get(nic.pool, 0) + nic.vfs
    for pool, total in declared.items():
        if pools[pool] > total:
            raise InvalidValue(
                where,
                f"its NICs of pool {pool} have {total} VFs but the node offers {pools[pool]}; "
                "a NIC is missing from the annotation",
            )
        surplus = total - pools[pool]
        for index in reversed(range(len(nics))):
            if surplus == 0:
                break
            nic = nics[index]
            if nic.pool == pool:
                cut = min(surplus, nic.vfs)
                surplus -= cut
                nics[index] = replace(nic, vfs=nic.vfs - cut)
    out = [nic for nic in nics if nic.vfs > 0]
    taken = {nic.name for nic in out}
    for pool, amount in pools.items():
        if pool not in declared:
            nic = _guessed(pool, amount, labels, taken)
            taken.add(nic.name)
            out.append(nic)
    check_nics(out, where)
    return out
