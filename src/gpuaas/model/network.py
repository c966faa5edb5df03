"""Network devices beside the GPUs: RDMA-capable NICs and their SR-IOV virtual functions.

Distributed training is bound by the latency between nodes, so a GPU cloud gives pods
RDMA NICs (InfiniBand or RoCE). An SR-IOV device plugin cuts a physical NIC into virtual
functions (VFs) and advertises them as an extended resource named for the pool
(``openshift.io/mlnx_ib``, ``nvidia.com/rdma_ib_a``, ``rdma/hca_shared``); a pod is given
VFs as it is given GPUs. GPUDirect RDMA pays off only when the NIC sits under the same PCIe
switch (``pcie_root``) or at least the same NUMA node as the pod's GPUs, hence
:class:`Alignment`.

A NIC with ``vfs == 1`` is passed whole (the physical function, or a shared RDMA device
counted once). VFs of one NIC are interchangeable; a VF is named ``<nic>-vf-<k>``
(:func:`vf_name`), the supply plane's one naming for them, as ``gpu-3`` is for GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class LinkType(StrEnum):
    INFINIBAND = "infiniband"
    ROCE = "roce"
    ETHERNET = "ethernet"


@dataclass(frozen=True, slots=True)
class Nic:
    """One physical NIC of a node.

    ``name``: the RDMA device / netdev name on the node (``mlx5_0``), what ``NCCL_IB_HCA``
    takes; ``pool``: the extended resource its VFs are advertised as; ``vfs``: how many pods'
    worth it offers (SR-IOV virtual functions; 1 = the NIC whole); ``pcie_root`` and
    ``numa_node``: its affinity to GPUs (empty / None = unknown, which makes required
    alignment impossible on this node); ``rail``/``fabric``: the network plane it sits on
    (rail-optimised clusters wire NIC *k* of every node to rail *k*).
    """

    name: str
    pool: str
    link: LinkType = LinkType.INFINIBAND
    speed_gbps: int = 0
    rdma: bool = True
    vfs: int = 1
    pcie_root: str = ""
    numa_node: int | None = None
    rail: str = ""
    fabric: str = ""
    pci_address: str = ""

    @property
    def has_topology(self) -> bool:
        return bool(self.pcie_root) or self.numa_node is not None


def vf_name(nic: str, index: int) -> str:
    """The name of a NIC's ``index``-th virtual function (``mlx5_0-vf-3``)."""
    return f"{nic}-vf-{index}"


class Alignment(StrEnum):
    """Whether a pod's NICs must (required), should (preferred) or need not (none) share a
    PCIe root, or failing that a NUMA node, with its GPUs."""

    REQUIRED = "required"
    PREFERRED = "preferred"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class NetworkRequest:
    """What one pod asks of the network: ``count`` VFs of ``pool`` per pod, or with ``per_gpu``
    one per GPU the pod is given (``count`` is then 0). ``pool`` empty = any RDMA pool of the
    node. The VFs are also an extended resource of the pod (quota covers them as any other)."""

    pool: str = ""
    count: int = 0
    per_gpu: bool = False
    alignment: Alignment = Alignment.PREFERRED

    def vfs_for(self, gpus: int) -> int:
        """VFs one pod takes when it is given ``gpus`` GPUs."""
        return gpus if self.per_gpu else self.count
