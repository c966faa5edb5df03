"""Which devices GPU telemetry reports on a node, in the supply plane's one device naming.

DCGM measures physical things: a whole GPU, or a MIG instance. A time-sliced or MPS replica,
or a milli-GPU share, is not measured on its own: its reading is its parent GPU's. So the
devices telemetry reports (*metered* devices) are ``gpu-3`` for every GPU that is not
MIG-partitioned (whole, shared or time-sliced alike) and ``gpu-3-mig-1g10gb-4`` for each MIG
instance, the names :mod:`gpuaas.supply.devices` gives (the same names a job's pods show in
the API). :func:`metered_name` says which metered device a device given to a pod reads, so
the service can tell which job holds what it measures.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuaas.model.devices import PartitionMode
from gpuaas.model.node import Node
from gpuaas.model.placement import DeviceKind, DeviceRef
from gpuaas.supply.catalogue import lookup
from gpuaas.supply.devices import gpu_device_name, mig_device_name

_MIB = 2**20


@dataclass(frozen=True, slots=True)
class MeteredDevice:
    """A device telemetry reports: ``gpu`` the (parent) GPU's index, ``uuid`` the GPU's UUID
    (a MIG instance's parent), ``profile`` the MIG profile (``""``: a whole GPU),
    ``start`` the instance's start memory slice, ``memory_bytes`` its framebuffer."""

    node: str
    name: str
    gpu: int
    uuid: str
    profile: str = ""
    start: int = 0
    memory_bytes: int = 0


def metered_devices(node: Node) -> list[MeteredDevice]:
    """Every device of ``node`` that telemetry reports, GPU by GPU in index order."""
    out: list[MeteredDevice] = []
    for gpu in sorted(node.gpus, key=lambda g: g.index):
        model = lookup(gpu.model)
        if gpu.partition.mode is PartitionMode.MIG:
            for inst in sorted(gpu.partition.instances):
                mib = model.mig_profile(inst.profile).memory_mib if model.mig_capable else 0
                out.append(
                    MeteredDevice(node.name, mig_device_name(gpu.index, inst), gpu.index,
                                  gpu.uuid, inst.profile, inst.start, mib * _MIB)
                )  # fmt: skip
        else:
            mib = gpu.memory_mib or model.memory_mib
            out.append(
                MeteredDevice(node.name, gpu_device_name(gpu.index), gpu.index, gpu.uuid,
                              memory_bytes=mib * _MIB)
            )  # fmt: skip
    return out


def metered_name(ref: DeviceRef) -> str | None:
    """The metered device that reads for ``ref`` (a device given to a pod): itself for a
    whole GPU, a share of one (named as its GPU) or a MIG instance; its parent GPU for a
    time-sliced or MPS replica; None for a NIC."""
    if ref.kind is DeviceKind.NIC:
        return None
    if ref.kind is DeviceKind.REPLICA:
        return gpu_device_name(ref.gpu)
    return ref.name
