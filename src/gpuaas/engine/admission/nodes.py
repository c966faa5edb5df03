"""Physical fit at admission: quota alone is not enough when the nodes are known.

A workload is admitted only if the placement engine also places it: every pod set becomes a
:class:`~gpuaas.model.workload.PodSet` whose node selector is the pod set's ``nodeSelector`` plus
the ``nodeLabels`` of the flavors it was assigned and whose tolerations add the flavors'
tolerations, and :func:`gpuaas.engine.gang.place_workload` reserves all pods on a
:class:`~gpuaas.engine.snapshot.Snapshot` or none (gang, topology, devices). The reservation is
kept while the workload holds quota and given back (:func:`gpuaas.engine.gang.release`) when it is
evicted or finishes.

A scenario's node (``name``, ``labels``, ``capacity``) becomes a :class:`~gpuaas.model.node.Node`
by :func:`node_from_capacity`: ``nvidia.com/gpu`` whole generic GPUs, ``nvidia.com/mig-*``
instances on generic MIG-mode GPUs. The placement policy defaults to ``packing``.

Requests map to the placement engine's GPU forms: ``nvidia.com/gpu`` whole GPUs,
``nvidia.com/mig-<profile>`` MIG instances (the device plugin's ``.me`` is the profile's ``+me``),
and :data:`GPU_MILLI` a share of one GPU in milli-GPU (a multiple of 1000 is that many whole
GPUs). cpu and memory are the snapshot's; any other resource (``ephemeral-storage``,
``example.com/fpga``) is checked against the nodes' ``extra`` allocatables after the gang is
placed (conservative: a gang that fits only with another arrangement is refused).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuaas.engine.admission.gpu_size import GPU_MILLI, mig_compute_slices
from gpuaas.engine.gang import GangPlacement, place_workload, release, reserve
from gpuaas.engine.locality import DEFAULT_WEIGHT, WarmSets, place_reading
from gpuaas.engine.place import Unschedulable
from gpuaas.engine.policies import make_policy
from gpuaas.engine.reasons import Code, Reason, placement_failed
from gpuaas.engine.snapshot import Snapshot
from gpuaas.model.dataset import DataLocality
from gpuaas.model.devices import GPU, MigInstance, Partition, PartitionMode
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import AdmissionPodSet, AdmissionWorkload, ResourceFlavor
from gpuaas.model.network import NetworkRequest
from gpuaas.model.node import Node, Taint, TaintEffect, Toleration
from gpuaas.model.resources import CPU, MEMORY, MIG_PREFIX, NVIDIA_GPU, ResourceList
from gpuaas.model.topology import Topology
from gpuaas.model.workload import PodRequest, PodSet, Workload
from gpuaas.supply.mig import COMPUTE_SLICES

#: The model name of GPUs known only by count (a scenario node's ``nvidia.com/gpu``).
GENERIC_GPU = "generic"
#: The placement policy admission uses unless told otherwise: packing keeps whole nodes free
#: for the large gangs that come later, and it is the cheapest score on a large fleet.
DEFAULT_ADMISSION_POLICY = "packing"
_NOTHING_TRIED = Reason(Code.WAITING_FOR_ADMISSION)  # last_reason before any failure


@dataclass(slots=True)
class NodeCapacity:
    """A node known only by labels, taints and allocatable amounts (a scenario's ``nodes:``)."""

    name: str
    labels: dict[str, str]
    capacity: ResourceList
    taints: tuple[Taint, ...] = ()

    def to_node(self) -> Node:
        return node_from_capacity(self.name, self.labels, self.capacity, self.taints)


def node_from_capacity(
    name: str,
    labels: Mapping[str, str],
    capacity: Mapping[str, int],
    taints: Sequence[Taint] = (),
) -> Node:
    """A :class:`Node` from canonical amounts, as the device plugin advertises them:
    ``nvidia.com/gpu`` becomes that many whole generic GPUs; ``nvidia.com/mig-<profile>: n``
    becomes n MIG instances on generic MIG-mode GPUs (as many per GPU as its 7 compute slices
    allow); resources other than cpu, memory and GPUs go to ``extra``."""
    extra: dict[str, int] = {}
    gpus = [
        GPU(index=g, uuid=f"GPU-{name}-{g}", model=GENERIC_GPU, memory_mib=0)
        for g in range(capacity.get(NVIDIA_GPU, 0))
    ]
    for resource, amount in capacity.items():
        where = f"node {name}: capacity.{resource}"
        if resource == GPU_MILLI:
            raise InvalidValue(
                where, "a node offers whole GPUs (nvidia.com/gpu); shares are cut from those"
            )
        if resource.startswith(MIG_PREFIX):
            slices = mig_compute_slices(resource, where)  # validates the profile
            per_gpu = COMPUTE_SLICES // slices
            profile = mig_profile_of(resource)
            left = amount
            while left > 0:
                n = min(per_gpu, left)
                instances = tuple(MigInstance(k, 1, profile, slices) for k in range(n))
                g = len(gpus)
                gpus.append(
                    GPU(
                        index=g,
                        uuid=f"GPU-{name}-{g}",
                        model=GENERIC_GPU,
                        memory_mib=0,
                        partition=Partition(PartitionMode.MIG, instances),
                    )
                )
                left -= n
        elif resource not in (CPU, MEMORY, NVIDIA_GPU):
            extra[resource] = amount
    return Node(
        name=name,
        cpu_milli=capacity.get(CPU, 0),
        memory_bytes=capacity.get(MEMORY, 0),
        gpus=gpus,
        labels=dict(labels),
        taints=list(taints),
        extra=extra,
        topology=Topology.from_labels(labels),
    )


def tolerated(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> bool:
    """Whether every NoSchedule/NoExecute taint is tolerated."""
    return all(
        taint.effect == TaintEffect.PREFER_NO_SCHEDULE
        or any(tol.tolerates(taint) for tol in tolerations)
        for taint in taints
    )


def mig_profile_of(resource: str) -> str:
    """``nvidia.com/mig-1g.10gb.me`` -> ``1g.10gb+me`` (the device plugin spells ``+`` as ``.``)."""
    profile = resource.removeprefix(MIG_PREFIX)
    return profile[:-3] + "+me" if profile.endswith(".me") else profile


def pod_request(
    requests: Mapping[str, int],
    node_selector: Mapping[str, str],
    tolerations: Sequence[Toleration],
    where: str,
    time_sliced: bool = False,
    network: NetworkRequest | None = None,
) -> tuple[PodRequest, dict[str, int]]:
    """The placement engine's request for one pod, and its extended (other) resources.
    ``network``: the pod's NICs / VFs, which the engine places beside its GPUs.

    ``time_sliced``: the pod's flavor has only time-sliced GPUs, where the GPU operator
    advertises each replica as one ``nvidia.com/gpu``: whole GPUs are asked as replicas there.
    """
    gpus = requests.get(NVIDIA_GPU, 0)
    milli = requests.get(GPU_MILLI, 0)
    mig = tuple(
        sorted(
            (mig_profile_of(r), n) for r, n in requests.items() if r.startswith(MIG_PREFIX) and n
        )
    )
    if sum(bool(x) for x in (gpus, milli, mig)) > 1:
        raise InvalidValue(
            f"{where}.requests",
            f"a pod asks for one GPU form only: {NVIDIA_GPU}, {GPU_MILLI} or nvidia.com/mig-*",
        )
    gpu_milli = 0
    if milli:
        if milli < 1000:
            gpus, gpu_milli = 1, milli
        elif milli % 1000 == 0:
            gpus = milli // 1000
        else:
            raise InvalidValue(
                f"{where}.requests.{GPU_MILLI}",
                f"a share is below 1000 (one GPU) or a multiple of 1000, got {milli}",
            )
    extended = {
        r: n
        for r, n in requests.items()
        if n and r not in (CPU, MEMORY, NVIDIA_GPU, GPU_MILLI) and not r.startswith(MIG_PREFIX)
    }
    replicas = 0
    if time_sliced and gpus and not gpu_milli:
        gpus, replicas = 0, gpus
    pod = PodRequest(
        cpu_milli=requests.get(CPU, 0),
        memory_bytes=requests.get(MEMORY, 0),
        gpus=gpus,
        gpu_milli=gpu_milli,
        mig=mig,
        replicas=replicas,
        node_selector=tuple(sorted(node_selector.items())),
        tolerations=tuple(tolerations),
        network=network,
    )
    return pod, extended


@dataclass(frozen=True, slots=True)
class NodePlacement:
    """Where an admitted workload's pods run: the gang's reservation plus extended resources."""

    gang: GangPlacement
    extended: tuple[tuple[int, str, int], ...] = ()  # (node index, resource, amount)
    nodes: dict[str, list[str]] = field(default_factory=dict, hash=False)  # pod set -> nodes


class NodePool:
    """The nodes' free capacity as a snapshot; ``place`` reserves a whole workload or nothing."""

    def __init__(
        self,
        nodes: Sequence[Node | NodeCapacity],
        flavors: Mapping[str, ResourceFlavor],
        policy: str = DEFAULT_ADMISSION_POLICY,
    ) -> None:
        #: Nodes by snapshot index; None for a removed node's slot (see :meth:`remove_node`).
        self.nodes: list[Node | None] = [
            n.to_node() if isinstance(n, NodeCapacity) else n for n in nodes
        ]
        seen: set[str] = set()
        for node in self.nodes:
            assert node is not None
            if node.name in seen:
                raise InvalidValue(f"node {node.name}", "name is used twice")
            seen.add(node.name)
        self.flavors = flavors
        self.snapshot = Snapshot.from_nodes(self.nodes)
        self.policy = make_policy(policy)
        self.extra_free: list[dict[str, int]] = [dict(n.extra) for n in self.nodes if n]
        # a workload shape that did not fit still does not until something is released
        self._released = 0
        self._no_fit: dict[tuple[object, ...], tuple[int, Reason, str | None]] = {}
        self.last_failed: str | None = None  # the pod set that did not fit in the last place()
        self.last_reason: Reason = _NOTHING_TRIED
        self._converted: dict[tuple[object, ...], tuple[PodSet, dict[str, int]]] = {}
        self._sliced: dict[str, bool] = {}
        #: where each dataset is warm (see gpuaas.engine.locality); kept by the driver
        self.warm = WarmSets(n.name for n in self.nodes if n is not None)
        self.locality_weight = DEFAULT_WEIGHT

    def _workload(
        self, wl: AdmissionWorkload, assignment: Mapping[str, Mapping[str, str]]
    ) -> tuple[Workload, dict[str, dict[str, int]]]:
        pod_sets: list[PodSet] = []
        extended: dict[str, dict[str, int]] = {}
        for ps in wl.pod_sets:
            flavors = assignment.get(ps.name, {})
            # pod sets of the same shape are converted again and again (every workload of a
            # size, every retry on another flavor): remember conversions by content
            key = (
                ps.name,
                ps.count,
                tuple(ps.requests.items()),
                tuple(ps.node_selector.items()),
                ps.tolerations,
                ps.topology,
                tuple(sorted(set(flavors.values()))),
                ps.network,
            )
            found = self._converted.get(key)
            if found is None:
                pod, ext = self._pod(wl, ps, flavors)
                found = (PodSet(ps.name, ps.count, pod, ps.topology), ext)
                if len(self._converted) >= 100_000:
                    self._converted.clear()
                self._converted[key] = found
            pod_sets.append(found[0])
            if found[1]:
                extended[ps.name] = found[1]
        return Workload(wl.name, tuple(pod_sets), wl.priority, wl.data), extended

    def _pod(
        self, wl: AdmissionWorkload, ps: AdmissionPodSet, flavors: Mapping[str, str]
    ) -> tuple[PodRequest, dict[str, int]]:
        labels: dict[str, str] = dict(ps.node_selector)
        tolerations = list(ps.tolerations)
        names = sorted(set(flavors.values()))
        for flavor_name in names:
            flavor = self.flavors[flavor_name]
            labels.update(flavor.node_labels)
            tolerations.extend(flavor.tolerations)
        time_sliced = bool(names) and all(self._time_sliced(name) for name in names)
        return pod_request(
            ps.requests,
            labels,
            tolerations,
            f"workload {wl.name}: podSets.{ps.name}",
            time_sliced,
            ps.network,
        )

    def _time_sliced(self, flavor_name: str) -> bool:
        """Whether every GPU on the flavor's nodes is time-sliced (then ``nvidia.com/gpu`` counts
        replicas, as the GPU operator advertises them); a flavor without GPUs is not."""
        known = self._sliced.get(flavor_name)
        if known is None:
            labels = self.flavors[flavor_name].node_labels.items()
            gpus = [
                gpu
                for node in self.nodes
                if node is not None and all(node.labels.get(k) == v for k, v in labels)
                for gpu in node.gpus
            ]
            known = bool(gpus) and all(gpu.partition.shared for gpu in gpus)
            self._sliced[flavor_name] = known
        return known

    def place(
        self, wl: AdmissionWorkload, assignment: Mapping[str, Mapping[str, str]]
    ) -> NodePlacement | None:
        """Reserve every pod of ``wl`` on the nodes of its flavors, or nothing (``None``; then
        ``last_failed`` names a pod set that cannot be placed and ``last_reason`` says why)."""
        gang_wl, extended = self._workload(wl, assignment)
        shape: tuple[object, ...] = tuple(
            (ps.name, ps.pod, ps.count, ps.topology) for ps in gang_wl.pod_sets
        )
        tenant = wl.queue.partition("/")[0]
        if wl.data is not None and wl.data.locality is DataLocality.REQUIRED:
            # where the dataset is warm decides too
            shape = (*shape, tenant, wl.data, self.warm.version)
        known = self._no_fit.get(shape)
        if known is not None and known[0] == self._released:
            _, self.last_reason, self.last_failed = known
            return None
        result = place_reading(
            self.snapshot, gang_wl, self.policy, self.warm, tenant, weight=self.locality_weight
        )
        if isinstance(result, Unschedulable):
            self._fail(gang_wl, result)
            self._no_fit[shape] = (self._released, self.last_reason, self.last_failed)
            return None
        taken: list[tuple[int, str, int]] = []
        if extended:
            need: dict[tuple[int, str], int] = {}
            for pod in result.pods:
                for r, amount in extended.get(pod.pod_set, {}).items():
                    key = (pod.placement.node, r)
                    need[key] = need.get(key, 0) + amount
            short = [
                (node, r, amount)
                for (node, r), amount in need.items()
                if self.extra_free[node].get(r, 0) < amount
            ]
            if short:
                release(self.snapshot, result, self.policy)
                node, r, amount = short[0]
                self.last_failed = next(p.pod_set for p in result.pods if p.placement.node == node)
                words = Reason(
                    Code.EXTENDED_RESOURCE,
                    {
                        "node": self.snapshot.names[node],
                        "resource": r,
                        "free": self.extra_free[node].get(r, 0),
                        "needed": amount,
                    },
                )
                self.last_reason = placement_failed(
                    Code.EXTENDED_RESOURCE, words.render(), **words.fields
                )
                return None
            for (node, r), amount in need.items():
                self.extra_free[node][r] -= amount
                taken.append((node, r, amount))
        names: dict[str, list[str]] = {ps.name: [] for ps in wl.pod_sets}
        for pod in result.pods:
            names[pod.pod_set].append(pod.placement.node_name)
        return NodePlacement(result, tuple(taken), names)

    def _fail(self, gang_wl: Workload, failure: Unschedulable) -> None:
        """Name the pod set to blame: the one that cannot be placed on its own, else the first."""
        self.last_reason = failure.cause()
        self.last_failed = gang_wl.pod_sets[0].name
        if len(gang_wl.pod_sets) == 1:
            return
        for ps in gang_wl.pod_sets:
            alone = place_workload(self.snapshot, Workload(gang_wl.name, (ps,)), self.policy)
            if isinstance(alone, Unschedulable):
                self.last_failed = ps.name
                return
            release(self.snapshot, alone, self.policy)

    # --- fleet changes (see gpuaas.engine.admission.fleet_changes) -----------------------

    def add_nodes(self, nodes: Sequence[Node | NodeCapacity]) -> list[int]:
        """Add fully free nodes in place (:meth:`Snapshot.add_nodes`); returns their indices.
        A name already in the pool is an InvalidValue and changes nothing."""
        added = [n.to_node() if isinstance(n, NodeCapacity) else n for n in nodes]
        slots = self.snapshot.add_nodes(added).tolist()
        for slot, node in zip(slots, added, strict=True):
            self.warm.add_node(node.name)
            if slot == len(self.nodes):
                self.nodes.append(node)
                self.extra_free.append(dict(node.extra))
            else:
                self.nodes[slot] = node
                self.extra_free[slot] = dict(node.extra)
        self._fleet_changed()
        return slots

    def remove_node(self, index: int) -> None:
        """Take node ``index`` out (it must hold no reservation: release its workloads first)."""
        gone = self.nodes[index]
        self.snapshot.remove_node(index)
        if gone is not None:
            self.warm.forget_node(gone.name)
        self.nodes[index] = None
        self.extra_free[index] = {}
        self._fleet_changed()

    def replace_node(self, index: int, node: Node | NodeCapacity) -> None:
        """Give node ``index`` new facts (it must hold no reservation at this moment)."""
        new = node.to_node() if isinstance(node, NodeCapacity) else node
        self.snapshot.replace_node(index, new)
        self.nodes[index] = new
        self.extra_free[index] = dict(new.extra)
        self._fleet_changed()

    def set_taints(self, index: int, taints: Sequence[Taint]) -> None:
        """Replace node ``index``'s taints (cordon/uncordon); reservations there stay."""
        node = self.nodes[index]
        if node is None:
            raise InvalidValue(f"node {index}", "is not in the fleet")
        self.nodes[index] = dataclasses.replace(node, taints=list(taints))
        self.snapshot.set_taints(index, taints)
        self._fleet_changed()

    def _fleet_changed(self) -> None:
        self._sliced.clear()
        self.freed()

    def freed(self) -> None:
        """Capacity came back outside :meth:`release` (a node returned): shapes that did not
        fit may fit now."""
        self._released += 1

    def release(self, wl: AdmissionWorkload, placement: NodePlacement) -> None:
        """Give back everything ``placement`` holds (eviction or finish)."""
        release(self.snapshot, placement.gang, self.policy)
        for node, r, amount in placement.extended:
            self.extra_free[node][r] += amount
        self._released += 1

    def reserve(self, wl: AdmissionWorkload, placement: NodePlacement) -> None:
        """Reserve exactly ``placement`` again (undoing a :meth:`release`)."""
        reserve(self.snapshot, placement.gang, self.policy)
        for node, r, amount in placement.extended:
            self.extra_free[node][r] -= amount

    def used(self, name: str) -> ResourceList:
        """What is reserved on node ``name``: cpu, memory, whole GPUs in milli, extended."""
        i = self.snapshot.index_of(name)
        snap = self.snapshot
        node = self.nodes[i]
        assert node is not None  # index_of knows only nodes in the fleet
        out: ResourceList = {
            CPU: int(snap.cpu_total[i] - snap.cpu_free[i]),
            MEMORY: int(snap.mem_total[i] - snap.mem_free[i]),
            GPU_MILLI: sum(1000 - int(f) for f in snap.gpu_free[i].tolist() if f >= 0),
        }
        for r, total in node.extra.items():
            out[r] = total - self.extra_free[i].get(r, 0)
        return out
