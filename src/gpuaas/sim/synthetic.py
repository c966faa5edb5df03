"""A synthetic GPU cloud and workload mix, for placement benchmarks and property tests.

Real traces (``data/openb``) have neither topology nor MIG nor gangs, so the cloud-scale benchmark
needs a generator. The fleet is laid out the way large GPU clouds are built: zones of blocks (a
spine) of racks; a rack holds nodes of one SKU; every node has 8 GPUs. B200 racks are cut into
multi-node NVLink domains (NVL64-style, 8 nodes); elsewhere NVLink ends at the node's baseboard, so
each node is its own NVLink domain. Some A100/H100 nodes are MIG-partitioned (layouts valid by
NVIDIA's placement table, see ``data/mig``) and some L40S nodes are time-sliced, as a provider
would configure them per node.

With ``nics_per_node`` the nodes also carry RDMA NICs (InfiniBand, SR-IOV with ``nic_vfs``
VFs each, pool ``nic_pool``): NIC *k* sits on PCIe root ``pci-k`` with the GPUs wired to it
(GPU *g* on root ``g * nics // gpus``) and on that root's NUMA node, on rail ``rail-k``, and
every node of a block is on one fabric (``ib-<block>``), as rail-optimised clusters are built;
``nic_topology=False`` leaves the NICs' PCIe root and NUMA node unknown. The workload mix's
``network_share`` of 8-GPU pods (single and gangs) then ask one VF per GPU, alignment
``network_alignment``. Both default to off, which leaves fleets and mixes exactly as before.

The workload mix has single-pod work (1 GPU, a GPU share, MIG instances, time-sliced replicas,
8-GPU, DRA claims) and multi-node gangs that require one rack or one NVLink domain. Everything is
deterministic for a seed.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuaas.model.devices import GPU, Partition, PartitionMode
from gpuaas.model.errors import InvalidValue
from gpuaas.model.network import Alignment, LinkType, NetworkRequest, Nic
from gpuaas.model.node import Node
from gpuaas.model.topology import Level, Topology
from gpuaas.model.workload import (
    DeviceClaim,
    PodRequest,
    PodSet,
    TopologyMode,
    TopologyRequest,
    Workload,
)
from gpuaas.supply.catalogue import CATALOGUE
from gpuaas.supply.device_class import DeviceClass
from gpuaas.supply.mig import plan_layout

GIB = 2**30

H100 = "H100-80GB"
A100 = "A100-80GB"
H200 = "H200-141GB"
B200 = "B200-180GB"
L40S = "L40S"

#: Per-model node shape: (node CPU milli-cores, node memory bytes); GPU memory is the catalogue's.
NODE_SHAPES: dict[str, tuple[int, int]] = {
    H100: (224_000, 2048 * GIB),
    H200: (224_000, 2048 * GIB),
    B200: (224_000, 4096 * GIB),
    A100: (128_000, 1024 * GIB),
    L40S: (96_000, 768 * GIB),
}

#: mig-parted layouts the fleet uses on MIG-capable nodes; placed by the supply plane's planner,
#: so they are valid by NVIDIA's placement table.
MIG_LAYOUTS: tuple[str, ...] = ("all-1g.10gb", "all-balanced")
_MIG_MODELS = (H100, A100)

#: The DeviceClass the synthetic claims name: every device of NVIDIA's DRA driver.
GPU_DEVICE_CLASS = "gpu.nvidia.com"


@dataclass(frozen=True, slots=True)
class FleetSpec:
    """Shape of a synthetic fleet. Shares are of racks (a rack is one SKU)."""

    nodes: int
    gpus_per_node: int = 8
    nodes_per_rack: int = 16
    racks_per_block: int = 8
    blocks_per_zone: int = 10
    nvlink_nodes_b200: int = 8
    model_shares: tuple[tuple[str, float], ...] = (
        (H100, 0.40),
        (A100, 0.25),
        (H200, 0.15),
        (B200, 0.10),
        (L40S, 0.10),
    )
    mig_node_share: float = 0.25  # of A100/H100 nodes
    time_sliced_node_share: float = 0.5  # of L40S nodes
    time_slice_replicas: int = 4
    nics_per_node: int = 0  # RDMA NICs per node (0: none; see the module docstring)
    nic_vfs: int = 8
    nic_pool: str = "nvidia.com/rdma_ib"
    nic_topology: bool = True

    def validate(self) -> None:
        for name in (
            "nodes",
            "gpus_per_node",
            "nodes_per_rack",
            "racks_per_block",
            "blocks_per_zone",
            "nvlink_nodes_b200",
            "time_slice_replicas",
        ):
            if getattr(self, name) < 1:
                raise InvalidValue(name, f"must be at least 1, got {getattr(self, name)}")
        if not self.model_shares or any(share < 0 for _, share in self.model_shares):
            raise InvalidValue("model_shares", "needs at least one model and no negative share")
        if sum(share for _, share in self.model_shares) <= 0:
            raise InvalidValue("model_shares", "shares must not all be zero")
        for model, _ in self.model_shares:
            if model not in NODE_SHAPES:
                raise InvalidValue(
                    "model_shares", f"unknown model {model!r}; known: {', '.join(NODE_SHAPES)}"
                )
        if self.nics_per_node < 0 or self.nic_vfs < 1:
            raise InvalidValue("nics_per_node", "needs nics_per_node >= 0 and nic_vfs >= 1")
        for name in ("mig_node_share", "time_sliced_node_share"):
            if not 0 <= getattr(self, name) <= 1:
                raise InvalidValue(name, f"must be in [0, 1], got {getattr(self, name)}")


def _mig_partition(model: str, layout: str) -> Partition:
    instances = plan_layout(model, layout)
    return Partition(mode=PartitionMode.MIG, instances=instances, config=layout)


def _pick(rng: random.Random, shares: Sequence[tuple[str, float]]) -> str:
    names = [name for name, _ in shares]
    weights = [share for _, share in shares]
    return rng.choices(names, weights)[0]


def synthetic_fleet(spec: FleetSpec | int, seed: int = 0) -> list[Node]:
    """Nodes of a synthetic cloud; ``spec`` may be just a node count (default shape)."""
    if isinstance(spec, int):
        spec = FleetSpec(nodes=spec)
    spec.validate()
    rng = random.Random(seed)
    whole = Partition.whole()
    sliced = Partition.time_sliced(spec.time_slice_replicas)
    mig = {(m, name): _mig_partition(m, name) for m in _MIG_MODELS for name in MIG_LAYOUTS}
    nodes: list[Node] = []
    rack_model = ""
    for index in range(spec.nodes):
        rack_index, slot = divmod(index, spec.nodes_per_rack)
        block_index = rack_index // spec.racks_per_block
        zone_index = block_index // spec.blocks_per_zone
        if slot == 0:
            rack_model = _pick(rng, spec.model_shares)
        model = rack_model
        cpu_milli, memory_bytes = NODE_SHAPES[model]
        gpu_mib = CATALOGUE[model].memory_mib
        name = f"node-{index:05d}"
        rack = f"rack-{rack_index:04d}"
        # Multi-node NVLink on B200 racks; elsewhere NVLink ends at the node's baseboard.
        multi_node = model == B200
        nvlink = f"{rack}-nvl{slot // spec.nvlink_nodes_b200}" if multi_node else f"{name}-nvl"
        partition = whole
        if model in _MIG_MODELS and rng.random() < spec.mig_node_share:
            partition = mig[model, rng.choice(MIG_LAYOUTS)]
        elif model == L40S and rng.random() < spec.time_sliced_node_share:
            partition = sliced
        gpus = [
            GPU(
                index=g,
                uuid=f"GPU-{rng.getrandbits(32):08x}-{index:05x}-{g:04x}",
                model=model,
                memory_mib=gpu_mib,
                partition=partition,
                numa_node=g * 2 // spec.gpus_per_node,
                pcie_root=_root(g, spec) if spec.nics_per_node else "",
            )
            for g in range(spec.gpus_per_node)
        ]
        topology = Topology(
            zone=f"zone-{zone_index}",
            block=f"block-{block_index:03d}",
            rack=rack,
            nvlink_domain=nvlink,
        )
        labels = topology.labels()
        labels[Level.HOSTNAME.value] = name
        labels["nvidia.com/gpu.product"] = model
        labels["nvidia.com/gpu.count"] = str(spec.gpus_per_node)
        if partition.mode is PartitionMode.MIG:
            labels["nvidia.com/mig.config"] = partition.config
        nodes.append(
            Node(
                name=name,
                cpu_milli=cpu_milli,
                memory_bytes=memory_bytes,
                gpus=gpus,
                topology=topology,
                labels=labels,
                nics=_nics(spec, f"ib-{topology.block}", index),
            )
        )
    return nodes


def _root(gpu: int, spec: FleetSpec) -> str:
    """The PCIe root GPU ``gpu`` hangs off: the NICs split the GPUs evenly."""
    return f"pci-{gpu * spec.nics_per_node // spec.gpus_per_node}"


def _nics(spec: FleetSpec, fabric: str, index: int) -> list[Nic]:
    nics = spec.nics_per_node
    return [
        Nic(
            name=f"mlx5_{k}",
            pool=spec.nic_pool,
            link=LinkType.INFINIBAND,
            speed_gbps=400,
            vfs=spec.nic_vfs,
            pcie_root=f"pci-{k}" if spec.nic_topology else "",
            numa_node=k * 2 // nics
            if spec.nic_topology and nics > 1
            else (0 if spec.nic_topology else None),
            rail=f"rail-{k}",
            fabric=fabric,
            pci_address=f"0000:{0x10 + k:02x}:00.0",
        )
        for k in range(nics)
    ]


@dataclass(frozen=True, slots=True)
class WorkloadMix:
    """Relative weights of the workload kinds (by count, not by GPUs)."""

    one_gpu: float = 0.40
    fractional: float = 0.18
    mig: float = 0.12
    time_sliced: float = 0.06
    eight_gpu: float = 0.08
    claim: float = 0.04
    gang_rack: float = 0.08
    gang_nvlink: float = 0.02
    gang_sets: float = 0.02
    max_gang_pods: int = 12
    model_restricted_share: float = 0.2
    #: of 8-GPU pods (single and gangs): one VF per GPU (needs a fleet with NICs)
    network_share: float = 0.0
    network_alignment: Alignment = Alignment.PREFERRED
    nic_pool: str = "nvidia.com/rdma_ib"

    def kinds(self) -> list[tuple[str, float]]:
        return [
            (name, getattr(self, name))
            for name in (
                "one_gpu",
                "fractional",
                "mig",
                "time_sliced",
                "eight_gpu",
                "claim",
                "gang_rack",
                "gang_nvlink",
                "gang_sets",
            )
        ]

    def validate(self) -> None:
        weights = self.kinds()
        if any(w < 0 for _, w in weights) or sum(w for _, w in weights) <= 0:
            raise InvalidValue("mix", "weights must be non-negative and not all zero")
        if self.max_gang_pods < 2:
            raise InvalidValue("max_gang_pods", f"must be at least 2, got {self.max_gang_pods}")
        if not 0 <= self.network_share <= 1:
            raise InvalidValue("network_share", f"must be in [0, 1], got {self.network_share}")
        if not 0 <= self.model_restricted_share <= 1:
            raise InvalidValue(
                "model_restricted_share", f"must be in [0, 1], got {self.model_restricted_share}"
            )


#: Kinds whose workloads are a single pod (the rest are gangs).
SINGLE_POD_KINDS = frozenset({"one_gpu", "fractional", "mig", "time_sliced", "eight_gpu", "claim"})

_TRAINING_MODELS = frozenset({H100, H200, B200})
_RACK = TopologyRequest(Level.RACK, TopologyMode.REQUIRED)
_NVLINK = TopologyRequest(Level.NVLINK, TopologyMode.REQUIRED)
_PREFER_RACK = TopologyRequest(Level.RACK, TopologyMode.PREFERRED)
_PREFER_BLOCK = TopologyRequest(Level.BLOCK, TopologyMode.PREFERRED)


@dataclass(slots=True)
class _PodCache:
    """Identical requests share one frozen object: 100k workloads stay small in memory."""

    pods: dict[tuple[object, ...], PodRequest] = field(default_factory=dict)

    def get(self, **kwargs: object) -> PodRequest:
        key = tuple(sorted(kwargs.items()))
        pod = self.pods.get(key)
        if pod is None:
            pod = self.pods[key] = PodRequest(**kwargs)  # type: ignore[arg-type]
        return pod


def synthetic_workloads(
    count: int, seed: int = 0, mix: WorkloadMix | None = None
) -> list[Workload]:
    """``count`` workloads of the mix; ``workload.labels["kind"]`` names the kind."""
    if count < 0:
        raise InvalidValue("count", f"must not be negative, got {count}")
    mix = mix or WorkloadMix()
    mix.validate()
    rng = random.Random(seed)
    pods = _PodCache()
    kinds = mix.kinds()
    names = [name for name, _ in kinds]
    weights = [w for _, w in kinds]
    cumulative = list(itertools.accumulate(weights))
    out: list[Workload] = []
    vf_per_gpu = NetworkRequest(mix.nic_pool, per_gpu=True, alignment=mix.network_alignment)

    def nic() -> NetworkRequest | None:
        """One VF per GPU for ``network_share`` of 8-GPU pods (no draw when it is 0, so the
        stream of a mix without networks is unchanged)."""
        share = mix.network_share
        return vf_per_gpu if share and rng.random() < share else None

    for index in range(count):
        # One draw at a time keeps the stream prefix-stable: the first n workloads of a larger
        # run are the n workloads of a smaller one.
        kind = rng.choices(names, cum_weights=cumulative)[0]
        name = f"{kind.replace('_', '-')}-{index}"
        restrict = rng.random() < mix.model_restricted_share
        if kind == "one_gpu":
            models = frozenset({rng.choice(sorted(_TRAINING_MODELS))}) if restrict else frozenset()
            pod = pods.get(cpu_milli=8000, memory_bytes=64 * GIB, gpus=1, gpu_models=models)
            sets = (PodSet("main", 1, pod),)
        elif kind == "fractional":
            pod = pods.get(
                cpu_milli=2000,
                memory_bytes=16 * GIB,
                gpus=1,
                gpu_milli=rng.randrange(100, 1000, 50),
            )
            sets = (PodSet("main", 1, pod),)
        elif kind == "mig":
            profile = rng.choice(("1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"))
            pod = pods.get(cpu_milli=4000, memory_bytes=32 * GIB, mig=((profile, 1),))
            sets = (PodSet("main", 1, pod),)
        elif kind == "time_sliced":
            pod = pods.get(cpu_milli=2000, memory_bytes=16 * GIB, replicas=1)
            sets = (PodSet("main", 1, pod),)
        elif kind == "eight_gpu":
            models = frozenset({rng.choice(sorted(_TRAINING_MODELS))}) if restrict else frozenset()
            pod = pods.get(
                cpu_milli=96_000, memory_bytes=512 * GIB, gpus=8, gpu_models=models, network=nic()
            )
            sets = (PodSet("main", 1, pod),)
        elif kind == "claim":
            wanted = rng.choice((2, 4))
            claim = DeviceClaim(
                name="gpus",
                device_class=GPU_DEVICE_CLASS,
                count=wanted,
                selectors=(
                    'device.attributes["gpu.nvidia.com"].productName == "H100-80GB"'
                    if restrict
                    else 'device.capacity["gpu.nvidia.com"].memory'
                    '.compareTo(quantity("64Gi")) >= 0',
                ),
                match_attributes=("gpu.nvidia.com/nvlinkDomain",),
            )
            pod = pods.get(cpu_milli=16_000, memory_bytes=128 * GIB, claims=(claim,))
            sets = (PodSet("main", 1, pod),)
        elif kind == "gang_rack":
            workers = rng.randint(2, mix.max_gang_pods)
            if rng.random() < 0.75:
                pod = pods.get(cpu_milli=96_000, memory_bytes=512 * GIB, gpus=8, network=nic())
                sets = (PodSet("workers", workers, pod, _RACK),)
            else:
                # Many small pods: preferred, not required, tightness.
                pod = pods.get(cpu_milli=8000, memory_bytes=64 * GIB, gpus=1)
                topo = _PREFER_RACK if rng.random() < 0.5 else _PREFER_BLOCK
                sets = (PodSet("workers", workers * 2, pod, topo),)
        elif kind == "gang_nvlink":
            pod = pods.get(
                cpu_milli=96_000,
                memory_bytes=1024 * GIB,
                gpus=8,
                gpu_models=frozenset({B200}),
            )
            sets = (PodSet("workers", rng.randint(2, 8), pod, _NVLINK),)
        else:  # gang_sets: an MPI-style launcher plus workers, all in one rack
            launcher = pods.get(cpu_milli=4000, memory_bytes=8 * GIB)
            worker = pods.get(cpu_milli=96_000, memory_bytes=512 * GIB, gpus=8, network=nic())
            workers = rng.randint(2, mix.max_gang_pods)
            sets = (
                PodSet("launcher", 1, launcher, _RACK),
                PodSet("workers", workers, worker, _RACK),
            )
        out.append(Workload(name=name, pod_sets=sets, labels={"kind": kind}))
    return out


def synthetic_device_classes() -> list[DeviceClass]:
    """The DeviceClasses the synthetic claims refer to."""
    return [DeviceClass(GPU_DEVICE_CLASS, ('device.driver == "gpu.nvidia.com"',))]


def is_gang(workload: Workload) -> bool:
    """A gang has more than one pod: it must be placed whole or not at all."""
    return workload.pod_count > 1
