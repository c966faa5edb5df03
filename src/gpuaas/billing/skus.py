"""What a held device is, as a SKU (:class:`~gpuaas.model.billing.Sku`).

A pod's devices come in the supply plane's one naming (the names a job's pods show,
:class:`~gpuaas.model.placement.DeviceRef`): a whole GPU ``gpu-3`` is one unit of
``<model>/whole``; a share of a whole GPU (milli-GPU) is ``milli/1000`` of that unit; a MIG
instance ``gpu-3-mig-1g10gb-4`` is one unit of ``<model>/mig/<profile>`` (priced by its own
SKU, never as a GPU); a time-sliced or MPS replica ``gpu-3-ts-1`` of a GPU shared by ``n``
is ``1/n`` of a unit of ``<model>/timeslice/<n>`` (or ``mps``), so a quarter share held an
hour is 0.25 GPU-hours at the share SKU's price. A pod's CPU is vCPUs of ``cpu/cpu`` and its
memory GiB of ``memory/memory``. NICs are not billed. A volume is GB (10^9 bytes) of
``storage/storage/<storage class>`` (:func:`volume_held`; ``service/usage_volumes.py``).

The pool says where the capacity came from: the idle-capacity pool cluster sells spot
(``idle-pool``), a tenant's own cluster of carved whole nodes is ``reserved``, the shared
fleet ``on-demand``.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from gpuaas.billing.metering import Held
from gpuaas.model.billing import CapacityPool, Shape, Sku
from gpuaas.model.devices import GPU, PartitionMode
from gpuaas.model.node import Node
from gpuaas.model.placement import DeviceKind, PodPlacement
from gpuaas.supply.devices import mig_device_name

GIB = 1 << 30
GB = 10**9


def held_by(pod: PodPlacement, node: Node, pool: CapacityPool) -> list[Held]:
    """Everything ``pod`` (placed on ``node``) holds, as billable items."""
    label = f"{pod.pod_set}-{pod.index}"
    gpus = {g.index: g for g in node.gpus}
    out: list[Held] = []
    for device in pod.devices:
        if device.kind is DeviceKind.NIC:
            continue
        gpu = gpus.get(device.gpu)
        model = gpu.model if gpu is not None else "gpu"
        if device.kind is DeviceKind.MIG:
            profile = _profile_of(gpu, device.name) if gpu is not None else ""
            sku, fraction = Sku(model, Shape.MIG, pool, profile), Fraction(1)
        elif device.kind is DeviceKind.REPLICA:
            replicas = gpu.partition.replicas if gpu is not None else 1
            mps = gpu is not None and gpu.partition.mode is PartitionMode.MPS
            shape = Shape.MPS if mps else Shape.TIME_SLICE
            sku, fraction = Sku(model, shape, pool, str(replicas)), Fraction(1, max(1, replicas))
        else:  # a whole GPU, or a milli-GPU share of one
            sku, fraction = Sku(model, Shape.WHOLE, pool), Fraction(min(device.milli, 1000), 1000)
        out.append(Held(label, device.name, pod.node, sku.id, fraction))
    if pod.cpu_milli:
        cpu = Sku("cpu", Shape.CPU, pool)
        out.append(Held(label, "cpu", pod.node, cpu.id, Fraction(pod.cpu_milli, 1000)))
    if pod.memory_bytes:
        memory = Sku("memory", Shape.MEMORY, pool)
        out.append(Held(label, "memory", pod.node, memory.id, Fraction(pod.memory_bytes, GIB)))
    return out


def volume_held(name: str, size_bytes: int, storage_class: str, pool: CapacityPool) -> Held:
    """A volume of ``size_bytes`` as a billable item: ``size / 10^9`` units (GB) of
    ``storage/storage/<class>@<pool>`` (a class is priced on its own: NFS is not a local
    disk). Its ``device`` is ``volume/<name>``; it is in no pod and on no node."""
    sku = Sku("storage", Shape.STORAGE, pool, storage_class)
    return Held("", f"volume/{name}", "", sku.id, Fraction(size_bytes, GB))


def _profile_of(gpu: GPU, name: str) -> str:
    """The MIG profile (``1g.10gb``) of the instance named ``name`` on ``gpu``."""
    for instance in gpu.partition.instances:
        if name == mig_device_name(gpu.index, instance):
            return instance.profile
    return ""


def parse_sku(sku_id: str) -> Sku | None:
    """The :class:`Sku` an id names (None when it is not one): the inverse of ``Sku.id``."""
    body, at, pool_text = sku_id.rpartition("@")
    if not at:
        return None
    parts = body.split("/")
    try:
        pool = CapacityPool(pool_text)
        shape = Shape(parts[1]) if len(parts) in (2, 3) else None
    except ValueError:
        return None
    if shape is None or not parts[0]:
        return None
    return Sku(parts[0], shape, pool, parts[2] if len(parts) == 3 else "")


def gpu_skus(ids: Iterable[str]) -> list[Sku]:
    """The GPU SKUs among ``ids`` (whole, MIG, time-slice, MPS)."""
    gpu_shapes = {Shape.WHOLE, Shape.MIG, Shape.TIME_SLICE, Shape.MPS}
    return [s for s in map(parse_sku, ids) if s is not None and s.shape in gpu_shapes]
