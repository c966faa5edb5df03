"""Re-admitting workloads on exactly the devices they hold, after a restart or a rebuild.

A service that restarts (or rebuilds its engine because the fleet or the governance changed)
must not place its admitted workloads anew: their pods are running on particular GPUs, MIG
instances and replicas. :func:`record` turns a :class:`NodePlacement` into plain data (nodes by
name, so node order may change between builds) and :func:`readmit` reserves exactly that again
in a fresh engine, all or nothing, then records the workload as admitted on its flavors.

Recorded form, one entry per pod::

    {"podSet": "workers", "index": 0, "node": "h100-001",
     "assignment": {"cpu": 4000, "memory": 17179869184, "gpus": [[0, 1000], [1, 1000]],
                    "mig": [[2, 0]], "replicas": [[3, 1]], "devices": ["gpu-0", ...]}}

``gpus`` are (GPU slot, milli-GPU) on whole-mode GPUs, ``mig`` (GPU slot, instance index) and
``replicas`` (GPU slot, count), as in :class:`~gpuaas.engine.snapshot.Assignment`; a pod given
NICs also has ``"nics": [[nic_slot, vf], ...]`` (the position in ``node.nics`` and the VF),
which backends read as devices named ``mlx5_0-vf-3`` (:func:`~gpuaas.model.network.vf_name`).

**Identical pods are one entry.** A run of pods of one pod set with consecutive indexes, on one
node, holding no device (no GPU, MIG instance, replica, device or NIC: ``cpu: 1m`` pods) and the
same CPU and memory is recorded once with ``"count": n`` (pods ``index .. index+n-1``; an entry
without ``count`` is one pod, so placements recorded before are read as they were). A gang of
10,000 such pods packed on a few nodes is a few entries instead of 10,000 (issue 19: a 23 MB
placement per admission). Pods with devices are never merged: each holds its own. Readers
that need every pod (:func:`typed_pods`, :func:`restore`, the API's pod list) expand the runs
(:func:`pods_in`, :func:`expand`); readers that look at nodes or devices read entries as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuaas.engine.admission.cycle import AdmissionEngine
from gpuaas.engine.admission.nodes import NodePlacement, NodePool
from gpuaas.engine.gang import GangPlacement, PodPlacement
from gpuaas.engine.nics import device_name
from gpuaas.engine.place import Placement, reserve, unreserve
from gpuaas.engine.reasons import Code
from gpuaas.engine.snapshot import Assignment, OvercommitError
from gpuaas.model.errors import GpuaasError, InvalidValue
from gpuaas.model.governance import AdmissionWorkload
from gpuaas.model.node import Node
from gpuaas.model.placement import DeviceKind, DeviceRef
from gpuaas.model.placement import PodPlacement as TypedPod
from gpuaas.supply.devices import gpu_device_name, mig_device_name, mig_uuid, shared_device_name


class PlacementLost(GpuaasError):
    """A recorded placement cannot be reserved again (node gone, devices changed or taken).

    ``code`` says which: :attr:`~gpuaas.engine.reasons.Code.NODE_REMOVED` when a node left the
    fleet, :attr:`~gpuaas.engine.reasons.Code.DEVICE_LOST` otherwise.
    """

    def __init__(self, message: str, code: Code = Code.DEVICE_LOST) -> None:
        super().__init__(message)
        self.code = code


def record(placement: NodePlacement) -> list[dict[str, Any]]:
    """The pods of ``placement`` as plain data, runs of identical device-less pods as one
    entry with a count (see the module docstring)."""
    out: list[dict[str, Any]] = []
    run: dict[str, Any] | None = None  # the last entry, while identical pods may join it
    for pod in placement.gang.pods:
        a = pod.assignment
        bare = not (a.gpu_milli or a.mig or a.replicas or a.devices or a.nics)
        if (
            bare
            and run is not None
            and run["podSet"] == pod.pod_set
            and run["node"] == pod.placement.node_name
            and run["index"] + run.get("count", 1) == pod.index
            and run["assignment"]["cpu"] == a.cpu_milli
            and run["assignment"]["memory"] == a.memory_bytes
        ):
            run["count"] = run.get("count", 1) + 1
            continue
        out.append(
            {
                "podSet": pod.pod_set,
                "index": pod.index,
                "node": pod.placement.node_name,
                "assignment": {
                    "cpu": a.cpu_milli,
                    "memory": a.memory_bytes,
                    "gpus": [list(x) for x in a.gpu_milli],
                    "mig": [list(x) for x in a.mig],
                    "replicas": [list(x) for x in a.replicas],
                    "devices": list(a.devices),
                },
            }
        )
        if a.nics:
            out[-1]["assignment"]["nics"] = [list(x) for x in a.nics]
        run = out[-1] if bare else None
    return out


class Recorded(list[dict[str, Any]]):
    """A recorded placement (a plain list to JSON and the database) that carries its pods as
    :func:`typed_pods` built them at admission, so the readers within the admission's own
    step (metering, the backend's job) share one build instead of each making its own
    (four per admission before, 43 % of a 10,000-pod admission's CPU). Read back from the
    database it is a plain list again, and readers type it themselves."""

    typed: tuple[TypedPod, ...] | None = None


def pods_in(entry: Mapping[str, Any]) -> int:
    """How many pods a recorded entry stands for (``count``, else one)."""
    count = entry.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise PlacementLost(f"placement entry {entry.get('podSet')!r}: bad count {count!r}")
    return count


def holds_devices(entry: Mapping[str, Any]) -> bool:
    """Whether a recorded entry's pods hold any device (GPU, share, MIG instance, replica,
    NIC VF or named device): readers of devices alone skip the rest (a run of ``cpu: 1m``
    pods holds none)."""
    a = entry.get("assignment") or {}
    return any(a.get(k) for k in ("gpus", "mig", "replicas", "replicaIds", "nics", "devices"))


def expand(recorded: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per pod, in rank order (runs recorded with a ``count`` spelled out), for
    readers that show or walk each pod."""
    out: list[dict[str, Any]] = []
    for entry in recorded:
        n = pods_in(entry)
        if n == 1 and "count" not in entry:
            out.append(dict(entry))
            continue
        first = int(entry.get("index", 0))
        base = {k: v for k, v in entry.items() if k != "count"}
        out.extend({**base, "index": first + i} for i in range(n))
    return out


def _pairs(value: object, where: str) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list):
        raise PlacementLost(f"{where}: expected a list of pairs, got {value!r}")
    out = []
    for item in value:
        if not (isinstance(item, list | tuple) and len(item) == 2):
            raise PlacementLost(f"{where}: expected [slot, amount] pairs, got {item!r}")
        out.append((int(item[0]), int(item[1])))
    return tuple(out)


def _assignment(node: int, raw: Mapping[str, Any], where: str) -> Assignment:
    return Assignment(
        node=node,
        cpu_milli=int(raw.get("cpu", 0)),
        memory_bytes=int(raw.get("memory", 0)),
        gpu_milli=_pairs(raw.get("gpus", []), f"{where}.gpus"),
        mig=_pairs(raw.get("mig", []), f"{where}.mig"),
        replicas=_pairs(raw.get("replicas", []), f"{where}.replicas"),
        devices=tuple(str(d) for d in raw.get("devices", [])),
        nics=_pairs(raw.get("nics", []), f"{where}.nics"),
    )


def restore(
    pool: NodePool,
    wl: AdmissionWorkload,
    flavors: Mapping[str, Mapping[str, str]],
    recorded: Sequence[Mapping[str, Any]],
) -> NodePlacement:
    """Reserve exactly ``recorded`` in ``pool``, all or nothing; PlacementLost says why not."""
    gang_wl, extended = pool._workload(wl, flavors)
    pods_of = {ps.name: ps for ps in gang_wl.pod_sets}
    expected = {ps.name: ps.count for ps in gang_wl.pod_sets}
    snapshot = pool.snapshot
    done: list[PodPlacement] = []
    taken: list[tuple[int, str, int]] = []
    try:
        for i, raw in enumerate(recorded):
            where = f"workload {wl.name}: placement[{i}]"
            pod_set = pods_of.get(str(raw.get("podSet")))
            if pod_set is None:
                raise PlacementLost(f"{where}: no pod set {raw.get('podSet')!r}")
            name = str(raw.get("node"))
            try:
                node = snapshot.index_of(name)
            except KeyError:
                raise PlacementLost(
                    f"{where}: node {name} is no longer in the fleet", Code.NODE_REMOVED
                ) from None
            a = _assignment(node, raw.get("assignment") or {}, f"{where}.assignment")
            placement = Placement(node, name, a, 0.0)
            first = int(raw.get("index", 0))
            for index in range(first, first + pods_in(raw)):
                try:
                    reserve(snapshot, pod_set.pod, placement, pool.policy)
                except (OvercommitError, IndexError, ValueError) as exc:
                    raise PlacementLost(f"{where}: node {name}: {exc}") from None
                done.append(PodPlacement(pod_set.name, index, pod_set.pod, placement))
                expected[pod_set.name] -= 1
        missing = {ps: n for ps, n in expected.items() if n}
        if missing:
            raise PlacementLost(f"workload {wl.name}: recorded pods do not match: {missing}")
        need: dict[tuple[int, str], int] = {}
        for pod in done:
            for r, amount in extended.get(pod.pod_set, {}).items():
                key = (pod.placement.node, r)
                need[key] = need.get(key, 0) + amount
        for (node, r), amount in need.items():
            if pool.extra_free[node].get(r, 0) < amount:
                raise PlacementLost(f"node {snapshot.names[node]} has too little {r} free")
        for (node, r), amount in need.items():
            pool.extra_free[node][r] -= amount
            taken.append((node, r, amount))
    except PlacementLost:
        for pod in reversed(done):
            unreserve(snapshot, pod.pod, pod.placement, pool.policy)
        raise
    names: dict[str, list[str]] = {ps.name: [] for ps in wl.pod_sets}
    for pod in done:
        names[pod.pod_set].append(pod.placement.node_name)
    return NodePlacement(GangPlacement(wl.name, tuple(done)), tuple(taken), names)


def readmit(
    engine: AdmissionEngine,
    wl: AdmissionWorkload,
    flavors: Mapping[str, Mapping[str, str]],
    at: float,
    recorded: Sequence[Mapping[str, Any]] | None,
) -> None:
    """Admit ``wl`` again on ``flavors`` and exactly the ``recorded`` devices.

    Raises PlacementLost when the devices cannot be had again, InvalidValue when the flavors no
    longer fit the governance; either way the engine is left as it was.
    """
    placement = None
    if engine.pool is not None:
        if not recorded:
            raise PlacementLost(f"workload {wl.name}: no recorded placement")
        placement = restore(engine.pool, wl, flavors, recorded)
    try:
        engine.admit_existing(wl, flavors, at, placement)
    except InvalidValue:
        if placement is not None and engine.pool is not None:
            engine.pool.release(wl, placement)
        raise


def typed_pods(
    recorded: Sequence[Mapping[str, Any]], node_of: Callable[[str], Node | None]
) -> tuple[TypedPod, ...]:
    """The pods of a recorded placement as backends read them (see
    :mod:`gpuaas.model.placement`), in rank order: pod sets as recorded, pods by index.

    Devices take the supply plane's names and UUIDs from the node as it is now; a GPU slot in
    the record is the position in ``node.gpus``, not the GPU's index. A replica's identity
    (``gpu-3-ts-1``) is the one recorded under ``replicaIds`` (``[[slot, replica], ...]``)
    where the admission named it, else replicas are numbered from 0 on their GPU.
    """
    out: list[TypedPod] = []
    for i, raw in enumerate(recorded):
        rank = len(out)
        name = str(raw.get("node"))
        node = node_of(name)
        if node is None:
            raise PlacementLost(f"placement[{i}]: node {name} is not in the fleet",
                                Code.NODE_REMOVED)  # fmt: skip
        where = f"placement[{i}].assignment"
        a = raw.get("assignment") or {}
        devices: list[DeviceRef] = []
        try:
            for g, milli in _pairs(a.get("gpus", []), f"{where}.gpus"):
                gpu = node.gpus[g]
                kind = DeviceKind.GPU if milli >= 1000 else DeviceKind.SHARE
                devices.append(DeviceRef(gpu_device_name(gpu.index), gpu.uuid, gpu.index, kind,
                                         milli))  # fmt: skip
            for g, k in _pairs(a.get("mig", []), f"{where}.mig"):
                gpu = node.gpus[g]
                inst = gpu.partition.instances[k]
                devices.append(
                    DeviceRef(mig_device_name(gpu.index, inst), mig_uuid(gpu.uuid, inst),
                              gpu.index, DeviceKind.MIG, 0)
                )  # fmt: skip
            named = _pairs(a.get("replicaIds", []), f"{where}.replicaIds")
            if not named:
                named = tuple(
                    (g, r) for g, count in _pairs(a.get("replicas", []), f"{where}.replicas")
                    for r in range(count)
                )  # fmt: skip
            for g, r in named:
                gpu = node.gpus[g]
                devices.append(DeviceRef(shared_device_name(gpu.index, r), gpu.uuid, gpu.index,
                                         DeviceKind.REPLICA, 0))  # fmt: skip
            for j, vf in _pairs(a.get("nics", []), f"{where}.nics"):
                nic = node.nics[j]
                if vf >= nic.vfs:
                    raise IndexError(vf)
                name = device_name(nic, vf)
                devices.append(DeviceRef(name, nic.pci_address, -1, DeviceKind.NIC, 0))
        except IndexError:
            raise PlacementLost(f"{where}: node {name} no longer has these devices") from None
        pod = TypedPod(
            pod_set=str(raw.get("podSet")),
            index=int(raw.get("index", 0)),
            rank=rank,
            node=name,
            cpu_milli=int(a.get("cpu", 0)),
            memory_bytes=int(a.get("memory", 0)),
            devices=tuple(devices),
        )
        out.append(pod)
        for k in range(1, pods_in(raw)):  # a run: the same pod at the next indexes
            out.append(TypedPod(pod.pod_set, pod.index + k, rank + k, name, pod.cpu_milli,
                                pod.memory_bytes, pod.devices))  # fmt: skip
    return tuple(out)
