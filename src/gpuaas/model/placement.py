"""Where an admitted job's pods run, typed: the record every backend reads.

The engine records a placement as plain data (:func:`gpuaas.engine.admission.restore.record`):
GPU slots, MIG instance indexes and replica counts. A backend needs more and less than that:
the device *names* and *UUIDs* a process or a scheduler is given. :class:`PodPlacement` is that
view, in the supply plane's one device naming (:mod:`gpuaas.supply.devices`): ``gpu-3`` (a whole
GPU or a share of it), ``gpu-3-mig-1g10gb-4`` (a MIG instance), ``gpu-3-ts-1`` (a time-sliced
or MPS replica). ``uuid`` is what ``CUDA_VISIBLE_DEVICES`` takes: the GPU's UUID, or the MIG
instance's ``MIG-...`` UUID; a replica or a share sees its parent GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DeviceKind(StrEnum):
    GPU = "gpu"  # a whole GPU
    SHARE = "share"  # a fraction of one GPU (milli-GPU)
    MIG = "mig"  # a MIG instance
    REPLICA = "replica"  # a time-sliced or MPS replica
    NIC = "nic"  # an RDMA NIC or one of its SR-IOV virtual functions (gpuaas.model.network)


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """One device a pod was given.

    ``gpu``: the index of the (parent) GPU on its node, which Slurm's typed gres and
    ``nvidia-smi -i`` use; ``milli``: the share of that GPU (1000 for a whole GPU).
    A NIC (``kind`` NIC) is named ``mlx5_0`` or ``mlx5_0-vf-3``, its ``uuid`` is its PCI
    address (may be empty) and ``gpu`` is -1.
    """

    name: str
    uuid: str
    gpu: int
    kind: DeviceKind
    milli: int = 1000


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """One pod: ``rank`` counts pods over all pod sets in order (0 .. pods-1), which is the
    rank a distributed job's processes take; ``index`` is the pod's index within its pod set."""

    pod_set: str
    index: int
    rank: int
    node: str
    cpu_milli: int
    memory_bytes: int
    devices: tuple[DeviceRef, ...] = ()

    @property
    def visible_devices(self) -> str:
        """``CUDA_VISIBLE_DEVICES`` for this pod: its devices' UUIDs, each once, in order."""
        return ",".join(dict.fromkeys(d.uuid for d in self.gpu_devices))

    @property
    def gpu_indexes(self) -> tuple[int, ...]:
        """The GPU indexes on the node this pod uses (a MIG instance counts its parent)."""
        return tuple(sorted({d.gpu for d in self.gpu_devices}))

    @property
    def gpu_devices(self) -> tuple[DeviceRef, ...]:
        return tuple(d for d in self.devices if d.kind is not DeviceKind.NIC)

    @property
    def nics(self) -> tuple[DeviceRef, ...]:
        """The NICs / VFs this pod was given (``NCCL_IB_HCA`` takes their NIC names)."""
        return tuple(d for d in self.devices if d.kind is DeviceKind.NIC)
