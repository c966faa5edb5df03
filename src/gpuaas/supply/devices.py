"""Devices as NVIDIA's DRA driver publishes them, and the ResourceSlice that carries them.

Each whole GPU, MIG instance and time-sliced or MPS replica becomes one
:class:`~gpuaas.model.devices.Device` with attributes and capacity under the ``gpu.nvidia.com``
driver, named deterministically so that a claim keeps pointing at the same device across reloads:
``gpu-0`` (whole), ``gpu-0-mig-1g10gb-3`` (MIG instance at memory slice 3), ``gpu-0-ts-1``
(replica 1, time-sliced or MPS: ``sharingStrategy`` tells them apart, and an MPS replica's
``memory`` and ``computePercent`` are its share). DeviceClass selectors
(:mod:`gpuaas.supply.device_class`) read these attributes. A GPU whose PCIe root is known also
carries Kubernetes' standard ``resource.kubernetes.io/pcieRoot``, as the node's NICs do
(:mod:`gpuaas.supply.nics`, driver ``nic.gpuaas.io``), so one claim can align the two;
:func:`resource_slices` publishes the NICs in their own pool beside the GPUs.
"""

from __future__ import annotations

import re
import uuid as uuidlib
from typing import Any

from gpuaas.model.devices import GPU, Device, MigInstance, PartitionMode
from gpuaas.model.errors import GpuaasError
from gpuaas.model.node import Node
from gpuaas.model.quantity import Quantity
from gpuaas.model.resources import GPU_DRIVER
from gpuaas.supply.catalogue import GpuModel, lookup
from gpuaas.supply.nics import NIC_DRIVER, PCIE_ROOT_ATTRIBUTE, nic_devices

RESOURCE_API_VERSION = "resource.k8s.io/v1"
#: Kubernetes caps one ResourceSlice at 128 devices (ResourceSliceMaxDevices).
MAX_DEVICES_PER_SLICE = 128
_MIB = 2**20
_MIG_NAMESPACE = uuidlib.UUID("5b1f6f1e-6c0a-4f55-9c1b-6d4b1c2e7a10")


#: Every attribute name a published device may carry (CEL selectors are checked against it).
ATTRIBUTE_NAMES: frozenset[str] = frozenset(
    {
        "productName",
        "brand",
        "type",
        "uuid",
        "parentUUID",
        "index",
        "parentIndex",
        "minor",
        "profile",
        "placementStart",
        "placementSize",
        "mediaExtensions",
        "nvlinkDomain",
        "numaNode",
        "architecture",
        "cudaComputeCapability",
        "driverVersion",
        "sharingStrategy",
        "replica",
        "replicas",
    }
)
#: Every capacity name a published device may carry.
CAPACITY_NAMES: frozenset[str] = frozenset(
    {"memory", "computeSlices", "memorySlices", "computePercent"}
)


def gpu_device_name(gpu_index: int) -> str:
    return f"gpu-{gpu_index}"


def mig_device_name(gpu_index: int, instance: MigInstance) -> str:
    """``gpu-0-mig-1g10gb-3``: profile without dots/plus (DNS label), then the start slice."""
    profile = re.sub(r"[^a-z0-9]", "", instance.profile.lower())
    return f"gpu-{gpu_index}-mig-{profile}-{instance.start}"


def shared_device_name(gpu_index: int, replica: int) -> str:
    return f"gpu-{gpu_index}-ts-{replica}"


def mig_uuid(parent_uuid: str, instance: MigInstance) -> str:
    """A stable MIG UUID (``MIG-...``) derived from the parent GPU and the placement."""
    key = f"{parent_uuid}/{instance.profile}/{instance.start}"
    return f"MIG-{uuidlib.uuid5(_MIG_NAMESPACE, key)}"


def device_names(gpu: GPU) -> list[str]:
    """Names of the devices ``gpu`` publishes under its current partition."""
    partition = gpu.partition
    if partition.mode is PartitionMode.MIG:
        return [mig_device_name(gpu.index, inst) for inst in sorted(partition.instances)]
    if partition.shared:
        return [shared_device_name(gpu.index, r) for r in range(partition.replicas)]
    return [gpu_device_name(gpu.index)]


def _common(node: Node, gpu: GPU, model: GpuModel) -> dict[str, str | int | bool]:
    attributes: dict[str, str | int | bool] = {
        "productName": model.name,
        "brand": "Nvidia",
        "index": gpu.index,
        "minor": gpu.index,
        "numaNode": gpu.numa_node,
    }
    if not model.generic:
        attributes["architecture"] = model.architecture
        attributes["cudaComputeCapability"] = "{}.{}".format(*model.compute_capability)
    if node.topology.nvlink_domain:
        attributes["nvlinkDomain"] = node.topology.nvlink_domain
    if gpu.pcie_root:
        attributes[PCIE_ROOT_ATTRIBUTE] = gpu.pcie_root
    driver_version = node.labels.get("nvidia.com/cuda.driver-version.full") or node.labels.get(
        "gpuaas.io/driver-version", ""
    )
    if driver_version:
        attributes["driverVersion"] = driver_version
    return attributes


def _memory(gpu: GPU, model: GpuModel) -> int:
    return gpu.memory_mib or model.memory_mib


def gpu_devices(node: Node, gpu: GPU) -> list[Device]:
    """The devices one GPU publishes: itself, its MIG instances or its replicas."""
    model = lookup(gpu.model)
    common = _common(node, gpu, model)
    memory = Quantity.parse(_memory(gpu, model) * _MIB)
    partition = gpu.partition
    out: list[Device] = []
    if partition.mode is PartitionMode.MIG:
        for instance in sorted(partition.instances):
            profile = model.mig_profile(instance.profile) if model.mig_capable else None
            attributes = dict(common)
            attributes.update(
                type="mig",
                uuid=mig_uuid(gpu.uuid, instance),
                parentUUID=gpu.uuid,
                parentIndex=gpu.index,
                profile=instance.profile,
                placementStart=instance.start,
                placementSize=instance.size,
                mediaExtensions=bool(profile and profile.media_extensions),
            )
            mib = profile.memory_mib if profile else 0
            out.append(
                Device(
                    name=mig_device_name(gpu.index, instance),
                    node=node.name,
                    driver=GPU_DRIVER,
                    kind="mig",
                    gpu_index=gpu.index,
                    attributes=attributes,
                    capacity={
                        "memory": Quantity.parse(mib * _MIB),
                        "computeSlices": Quantity.parse(instance.compute_slices),
                        "memorySlices": Quantity.parse(instance.size),
                    },
                )
            )
        return out
    if partition.shared:
        mps = partition.mode is PartitionMode.MPS
        if mps:
            # MPS divides: the control daemon limits each client to its share of the memory
            # (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT) and of the SMs (ACTIVE_THREAD_PERCENTAGE).
            memory = Quantity.parse(_memory(gpu, model) // partition.replicas * _MIB)
        for replica in range(partition.replicas):
            attributes = dict(common)
            attributes.update(
                type="shared",
                uuid=gpu.uuid,
                parentUUID=gpu.uuid,
                sharingStrategy="mps" if mps else "time-slicing",
                replica=replica,
                replicas=partition.replicas,
            )
            out.append(
                Device(
                    name=shared_device_name(gpu.index, replica),
                    node=node.name,
                    driver=GPU_DRIVER,
                    kind="shared",
                    gpu_index=gpu.index,
                    attributes=attributes,
                    # Time-slicing shares memory, it does not divide it: each replica sees all.
                    capacity={"memory": memory}
                    | (
                        {"computePercent": Quantity.parse(100 // partition.replicas)} if mps else {}
                    ),
                )
            )
        return out
    attributes = dict(common)
    attributes.update(type="gpu", uuid=gpu.uuid)
    out.append(
        Device(
            name=gpu_device_name(gpu.index),
            node=node.name,
            driver=GPU_DRIVER,
            kind="gpu",
            gpu_index=gpu.index,
            attributes=attributes,
            capacity={"memory": memory},
        )
    )
    return out


def publish_devices(node: Node) -> list[Device]:
    """Every GPU device of ``node``, GPU by GPU in index order (its NICs:
    :func:`gpuaas.supply.nics.nic_devices`; both: :func:`node_devices`)."""
    out: list[Device] = []
    for gpu in sorted(node.gpus, key=lambda g: g.index):
        out.extend(gpu_devices(node, gpu))
    return out


def node_devices(node: Node) -> list[Device]:
    """The node's GPU devices, then its NIC devices."""
    return publish_devices(node) + nic_devices(node)


def _attribute(value: str | int | bool) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def _device_manifest(device: Device) -> dict[str, Any]:
    return {
        "name": device.name,
        "attributes": {k: _attribute(v) for k, v in sorted(device.attributes.items())},
        "capacity": {k: {"value": str(q)} for k, q in sorted(device.capacity.items())},
    }


def _slice_name(node: str, part: int, parts: int, driver: str = GPU_DRIVER) -> str:
    base = re.sub(r"[^a-z0-9.-]", "-", node.lower()).strip("-.") or "node"
    suffix = f"-{driver}" + (f"-{part}" if parts > 1 else "")
    return base[: 253 - len(suffix)] + suffix


def resource_slices(node: Node, generation: int = 1) -> list[dict[str, Any]]:
    """The node's ``resource.k8s.io/v1`` ResourceSlices: the GPUs' pool (at most 128 devices a
    slice), then, when the node has NICs, the ``nic.gpuaas.io`` driver's pool."""
    out = _driver_slices(node, GPU_DRIVER, publish_devices(node), generation, always=True)
    return out + _driver_slices(node, NIC_DRIVER, nic_devices(node), generation)


def _driver_slices(
    node: Node, driver: str, devices: list[Device], generation: int, always: bool = False
) -> list[dict[str, Any]]:
    if not devices and not always:
        return []
    chunks = [
        devices[i : i + MAX_DEVICES_PER_SLICE]
        for i in range(0, len(devices), MAX_DEVICES_PER_SLICE)
    ] or [[]]
    return [
        {
            "apiVersion": RESOURCE_API_VERSION,
            "kind": "ResourceSlice",
            "metadata": {"name": _slice_name(node.name, i, len(chunks), driver)},
            "spec": {
                "driver": driver,
                "nodeName": node.name,
                "pool": {
                    "name": node.name,
                    "generation": generation,
                    "resourceSliceCount": len(chunks),
                },
                "devices": [_device_manifest(d) for d in chunk],
            },
        }
        for i, chunk in enumerate(chunks)
    ]


def resource_slice(node: Node, generation: int = 1) -> dict[str, Any]:
    """The node's single GPU ResourceSlice; nodes with over 128 devices need
    :func:`resource_slices`."""
    slices = _driver_slices(node, GPU_DRIVER, publish_devices(node), generation, always=True)
    if len(slices) > 1:
        raise GpuaasError(
            f"node {node.name} publishes more than {MAX_DEVICES_PER_SLICE} devices; "
            "use resource_slices() for several ResourceSlices"
        )
    return slices[0]
