"""The engine's view of the fleet: numpy arrays plus incremental indexes.

Placement is a hot loop (the FGD benchmark places ~10,600 tasks on 1,213 nodes per run and the
placement benchmark 100,000 workloads on 10,000 nodes), so the snapshot keeps everything a filter
or a score needs as flat arrays indexed by node (0..N-1), and every index is updated by
:meth:`Snapshot.reserve` / :meth:`Snapshot.unreserve` in O(GPUs of the node + domains of the node):
a placement costs what changed, not the fleet size.

GPU forms:

- whole-mode GPUs carry ``gpu_free[n, g]`` in milli-GPU (1000 = fully free); a share request
  (``gpu_milli``) takes part of one GPU, a whole-GPU request takes fully free GPUs;
- MIG-mode GPUs have ``gpu_free == -1`` (not usable whole) and publish their instances, tracked
  per node and profile in ``mig_free`` (free instance count) with the instances themselves in
  ``mig_slots``;
- shared GPUs (time-sliced or MPS) have ``gpu_free == -1`` and ``replica_free[n, g]`` free
  replicas: both are advertised as one ``nvidia.com/gpu`` per replica and interchangeable within
  a GPU, so one replica counts the same in either mode.

Absent GPU slots (a node with fewer than ``gmax`` GPUs) hold ``-1`` in ``gpu_free`` and ``0``
in ``replica_free``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuaas.model.devices import PartitionMode
from gpuaas.model.errors import GpuaasError
from gpuaas.model.node import Node, Taint
from gpuaas.model.topology import LEVELS, Level

#: Milli-GPU of one whole GPU.
MILLI = 1000
#: Topology levels the snapshot indexes (the hostname level is the node itself).
DOMAIN_LEVELS: tuple[Level, ...] = tuple(lv for lv in LEVELS if lv is not Level.HOSTNAME)
_UIDS = itertools.count(1)


class OvercommitError(GpuaasError):
    """A reservation asked for more than is free: a bug in the caller, never silently clamped."""


@dataclass(frozen=True, slots=True)
class Assignment:
    """What one pod takes on one node; :meth:`Snapshot.unreserve` gives exactly this back.

    ``gpu_milli`` lists ``(gpu_slot, milli)`` (a whole GPU is 1000), ``mig`` lists
    ``(gpu_slot, instance_index)`` into the GPU's partition instances, ``replicas`` lists
    ``(gpu_slot, count)``; ``devices`` names the devices taken, as a DRA allocation would.
    """

    node: int
    cpu_milli: int = 0
    memory_bytes: int = 0
    gpu_milli: tuple[tuple[int, int], ...] = ()
    mig: tuple[tuple[int, int], ...] = ()
    replicas: tuple[tuple[int, int], ...] = ()
    devices: tuple[str, ...] = ()

    @property
    def milli_gpu(self) -> int:
        """Milli-GPU taken on whole-mode GPUs."""
        return sum(milli for _, milli in self.gpu_milli)


@dataclass(slots=True)
class _DomainIndex:
    """Per topology level: node -> domain id, and per domain free whole GPUs and free nodes."""

    names: list[str]
    of_node: np.ndarray  # int32[N], -1 when the node's domain is unknown at this level
    free_gpus: np.ndarray  # int64[D]: fully free whole-mode GPUs in the domain
    free_nodes: np.ndarray  # int64[D]: nodes whose GPUs are all fully free
    total_gpus: np.ndarray  # int64[D]
    nodes: np.ndarray  # int64[D]


@dataclass(slots=True)
class Snapshot:
    """Free capacity of a fleet, as arrays indexed by node; see the module docstring."""

    names: list[str]
    cpu_total: np.ndarray
    mem_total: np.ndarray
    cpu_free: np.ndarray
    mem_free: np.ndarray
    gpu_count: np.ndarray  # GPUs physically present per node
    gpu_free: np.ndarray  # int64[N, G]: milli free on whole-mode GPUs, -1 otherwise
    replica_total: np.ndarray  # int64[N, G]
    replica_free: np.ndarray  # int64[N, G]
    model_names: list[str]  # model id -> name
    model_of_node: np.ndarray  # int32[N], -1 for nodes without GPUs
    full_free: np.ndarray  # int64[N]: fully free whole-mode GPUs per node
    whole_gpus: np.ndarray  # int64[N]: whole-mode GPUs per node
    model_free_gpus: np.ndarray  # int64[M]: fully free whole-mode GPUs per model (flavor)
    model_free_milli: np.ndarray  # int64[M]: free milli on whole-mode GPUs per model
    profile_names: list[str]
    mig_free: np.ndarray  # int64[N, P]: free MIG instances per node and profile
    mig_slots: dict[tuple[int, int], list[tuple[int, int]]]  # (node, profile) -> free (g, inst)
    mig_profile_of: dict[tuple[int, int, int], int]  # (node, gpu, instance) -> profile id
    domains: dict[Level, _DomainIndex]
    labels: list[dict[str, str]]
    taints: list[tuple[Taint, ...]]
    tainted: np.ndarray  # int64 indices of nodes with at least one taint
    gpu_uuids: list[list[str]]
    version: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: int64[N]: the largest free milli on one whole-mode GPU of the node (-1 when it has none),
    #: so "does a share of s fit one GPU" is ``max_free >= s`` instead of a [N, G] scan.
    max_free: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: int64[N]: free time-sliced replicas per node (``replica_free.sum(axis=1)``, maintained).
    replica_sum: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: int64[P]: free MIG instances per profile, fleet-wide (``mig_free.sum(axis=0)``).
    mig_total: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: int64[N]: free MIG instances per node, all profiles (``mig_free.sum(axis=1)``,
    #: maintained), which policies that pack partitioned GPUs rank nodes by.
    mig_sum: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: Unique per snapshot object (copies get their own), so policy caches never mix snapshots.
    uid: int = field(default_factory=lambda: next(_UIDS))
    _label_index: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    _name_index: dict[str, int] = field(default_factory=dict)
    _capacity_milli: int = -1
    #: Static per-pod-kind node masks (GPU model, selector, taints), shared by copies.
    _static_masks: dict[tuple[object, ...], np.ndarray | None] = field(default_factory=dict)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_nodes(cls, nodes: Sequence[Node]) -> Snapshot:
        """Build the arrays and indexes from model nodes (O(fleet), done once)."""
        n = len(nodes)
        gmax = max((len(node.gpus) for node in nodes), default=0)
        gmax = max(gmax, 1)
        gpu_free = np.full((n, gmax), -1, dtype=np.int64)
        replica_total = np.zeros((n, gmax), dtype=np.int64)
        model_ids: dict[str, int] = {}
        model_of_node = np.full(n, -1, dtype=np.int32)
        profile_ids: dict[str, int] = {}
        mig_entries: list[tuple[int, int, int, str]] = []
        for i, node in enumerate(nodes):
            if node.gpus:
                model_of_node[i] = model_ids.setdefault(node.gpu_model, len(model_ids))
            for g, gpu in enumerate(node.gpus):
                mode = gpu.partition.mode
                if mode is PartitionMode.WHOLE:
                    gpu_free[i, g] = MILLI
                elif gpu.partition.shared:
                    replica_total[i, g] = gpu.partition.replicas
                else:
                    for k, instance in enumerate(gpu.partition.instances):
                        profile_ids.setdefault(instance.profile, len(profile_ids))
                        mig_entries.append((i, g, k, instance.profile))
        mig_free = np.zeros((n, max(len(profile_ids), 1)), dtype=np.int64)
        mig_slots: dict[tuple[int, int], list[tuple[int, int]]] = {}
        mig_profile_of: dict[tuple[int, int, int], int] = {}
        for i, g, k, profile in mig_entries:
            p = profile_ids[profile]
            mig_free[i, p] += 1
            mig_slots.setdefault((i, p), []).append((g, k))
            mig_profile_of[(i, g, k)] = p
        for slots in mig_slots.values():
            slots.sort(reverse=True)  # pop() takes the lowest (gpu, instance) first
        full_free = (gpu_free == MILLI).sum(axis=1).astype(np.int64)
        whole = (gpu_free >= 0).sum(axis=1).astype(np.int64)
        nm = max(len(model_ids), 1)
        model_free_gpus = np.zeros(nm, dtype=np.int64)
        model_free_milli = np.zeros(nm, dtype=np.int64)
        has = model_of_node >= 0
        np.add.at(model_free_gpus, model_of_node[has], full_free[has])
        np.add.at(model_free_milli, model_of_node[has], full_free[has] * MILLI)
        snap = cls(
            names=[node.name for node in nodes],
            cpu_total=np.array([node.cpu_milli for node in nodes], dtype=np.int64),
            mem_total=np.array([node.memory_bytes for node in nodes], dtype=np.int64),
            cpu_free=np.array([node.cpu_milli for node in nodes], dtype=np.int64),
            mem_free=np.array([node.memory_bytes for node in nodes], dtype=np.int64),
            gpu_count=np.array([len(node.gpus) for node in nodes], dtype=np.int64),
            gpu_free=gpu_free,
            replica_total=replica_total,
            replica_free=replica_total.copy(),
            model_names=list(model_ids),
            model_of_node=model_of_node,
            full_free=full_free,
            whole_gpus=whole,
            model_free_gpus=model_free_gpus,
            model_free_milli=model_free_milli,
            profile_names=list(profile_ids),
            mig_free=mig_free,
            mig_slots=mig_slots,
            mig_profile_of=mig_profile_of,
            domains={},
            labels=[node_labels(node) for node in nodes],
            taints=[tuple(node.taints) for node in nodes],
            tainted=np.array([i for i, node in enumerate(nodes) if node.taints], dtype=np.int64),
            gpu_uuids=[[gpu.uuid for gpu in node.gpus] for node in nodes],
        )
        snap._name_index = {name: i for i, name in enumerate(snap.names)}
        snap.version = np.zeros(n, dtype=np.int64)
        snap.max_free = gpu_free.max(axis=1)
        snap.replica_sum = snap.replica_free.sum(axis=1)
        snap.mig_total = mig_free.sum(axis=0)
        snap.mig_sum = mig_free.sum(axis=1)
        for level in DOMAIN_LEVELS:
            snap.domains[level] = snap._build_domain(level, nodes)
        return snap

    def _build_domain(self, level: Level, nodes: Sequence[Node]) -> _DomainIndex:
        ids: dict[str, int] = {}
        of_node = np.full(len(nodes), -1, dtype=np.int32)
        for i, node in enumerate(nodes):
            name = node.topology.domain(level, node.name)
            if name:
                of_node[i] = ids.setdefault(name, len(ids))
        d = len(ids)
        known = of_node >= 0
        free_gpus = np.zeros(d, dtype=np.int64)
        free_nodes = np.zeros(d, dtype=np.int64)
        total = np.zeros(d, dtype=np.int64)
        count = np.zeros(d, dtype=np.int64)
        np.add.at(free_gpus, of_node[known], self.full_free[known])
        np.add.at(free_nodes, of_node[known], self._node_is_free()[known].astype(np.int64))
        np.add.at(total, of_node[known], self.whole_gpus[known])
        np.add.at(count, of_node[known], 1)
        return _DomainIndex(list(ids), of_node, free_gpus, free_nodes, total, count)

    def _node_is_free(self) -> np.ndarray:
        return (self.full_free == self.whole_gpus) & (self.whole_gpus > 0)

    # ------------------------------------------------------------------ queries
    @property
    def size(self) -> int:
        return len(self.names)

    @property
    def gmax(self) -> int:
        return int(self.gpu_free.shape[1])

    def index_of(self, name: str) -> int:
        """Node index of ``name``; KeyError names the node when it is unknown."""
        try:
            return self._name_index[name]
        except KeyError:
            raise KeyError(f"unknown node {name!r}") from None

    def model_id(self, name: str) -> int:
        """Model id of a GPU model name, -1 when no node has it."""
        try:
            return self.model_names.index(name)
        except ValueError:
            return -1

    def profile_id(self, profile: str) -> int:
        try:
            return self.profile_names.index(profile)
        except ValueError:
            return -1

    def label_mask(self, key: str, value: str) -> np.ndarray:
        """Bool mask of nodes labelled ``key=value`` (built once per pair, then cached)."""
        mask = self._label_index.get((key, value))
        if mask is None:
            mask = np.fromiter(
                (labels.get(key) == value for labels in self.labels), dtype=bool, count=self.size
            )
            self._label_index[(key, value)] = mask
        return mask

    def domain_of(self, level: Level, node: int) -> int:
        return int(self.domains[level].of_node[node])

    def node_is_free(self, node: int) -> bool:
        """True when every whole-mode GPU of the node is fully free."""
        return bool(self.whole_gpus[node] > 0 and self.full_free[node] == self.whole_gpus[node])

    def allocated_milli(self) -> int:
        """Milli-GPU taken on whole-mode GPUs, fleet-wide (from the per-model index, O(models))."""
        if self._capacity_milli < 0:  # whole_gpus never changes: sum it once
            self._capacity_milli = int(self.whole_gpus.sum()) * MILLI
        return self._capacity_milli - int(self.model_free_milli.sum())

    # ------------------------------------------------------------------ reserve / unreserve
    def reserve(self, node: int, assignment: Assignment) -> None:
        """Take ``assignment`` on ``node``; raises OvercommitError (changing nothing) if it does
        not fit."""
        if assignment.node != node:
            raise OvercommitError(f"assignment is for node {assignment.node}, not {node}")
        self._check(assignment)
        self._apply(assignment, -1)

    def unreserve(self, assignment: Assignment) -> None:
        """Give back exactly what :meth:`reserve` took."""
        self._apply(assignment, +1)

    def _check(self, a: Assignment) -> None:
        n = a.node
        if a.cpu_milli > self.cpu_free[n] or a.memory_bytes > self.mem_free[n]:
            raise OvercommitError(f"{self.names[n]}: insufficient cpu or memory")
        if a.gpu_milli:
            taken: dict[int, int] = {}
            for g, milli in a.gpu_milli:
                taken[g] = taken.get(g, 0) + milli
            row = self.gpu_free[n].tolist()
            for g, milli in taken.items():
                if milli <= 0 or row[g] < milli:
                    raise OvercommitError(f"{self.names[n]}: GPU {g} has {row[g]} free")
        seen = set()
        for g, k in a.mig:
            p = self.mig_profile_of.get((n, g, k))
            if p is None or (g, k) in seen or (g, k) not in self.mig_slots.get((n, p), ()):
                raise OvercommitError(f"{self.names[n]}: MIG instance {g}/{k} is not free")
            seen.add((g, k))
        rep: dict[int, int] = {}
        for g, count in a.replicas:
            rep[g] = rep.get(g, 0) + count
        for g, count in rep.items():
            if count <= 0 or self.replica_free[n, g] < count:
                raise OvercommitError(f"{self.names[n]}: GPU {g} has too few free replicas")

    def _apply(self, a: Assignment, sign: int) -> None:
        n = a.node
        self.version[n] += 1
        if a.cpu_milli:
            self.cpu_free[n] += sign * a.cpu_milli
        if a.memory_bytes:
            self.mem_free[n] += sign * a.memory_bytes
        full_delta = 0
        if a.gpu_milli:
            model = int(self.model_of_node[n])
            row = self.gpu_free[n].tolist()  # a few GPUs: Python ints beat numpy scalars
            total = 0
            for g, milli in a.gpu_milli:
                before = row[g]
                after = before + sign * milli
                row[g] = after
                total += milli
                full_delta += (after == MILLI) - (before == MILLI)
            self.gpu_free[n] = row
            if model >= 0:
                self.model_free_milli[model] += sign * total
            self.max_free[n] = max(row)
        for g, k in a.mig:
            p = self.mig_profile_of[(n, g, k)]
            slots = self.mig_slots.setdefault((n, p), [])
            if sign < 0:
                slots.remove((g, k))
            else:
                slots.append((g, k))
                slots.sort(reverse=True)
            self.mig_free[n, p] += sign
            self.mig_total[p] += sign
            self.mig_sum[n] += sign
        for g, count in a.replicas:
            self.replica_free[n, g] += sign * count
            self.replica_sum[n] += sign * count
        if not full_delta:
            return  # free whole GPUs unchanged, so is "node fully free" and every domain index
        old = int(self.full_free[n])
        whole = int(self.whole_gpus[n])
        self.full_free[n] = old + full_delta
        model = int(self.model_of_node[n])
        if model >= 0:
            self.model_free_gpus[model] += full_delta
        node_delta = int(old + full_delta == whole) - int(old == whole) if whole > 0 else 0
        for index in self.domains.values():
            d = index.of_node[n]
            if d < 0:
                continue
            index.free_gpus[d] += full_delta
            if node_delta:
                index.free_nodes[d] += node_delta

    # ------------------------------------------------------------------ comparison (tests)
    def check_indexes(self) -> None:
        """Raise AssertionError when an incrementally kept index differs from a recomputation
        from the base arrays (for tests; O(fleet))."""
        assert np.array_equal(self.full_free, (self.gpu_free == MILLI).sum(axis=1))
        assert np.array_equal(self.max_free, self.gpu_free.max(axis=1))
        assert np.array_equal(self.replica_sum, self.replica_free.sum(axis=1))
        assert np.array_equal(self.mig_total, self.mig_free.sum(axis=0))
        assert np.array_equal(self.mig_sum, self.mig_free.sum(axis=1))
        has = self.model_of_node >= 0
        milli = np.zeros_like(self.model_free_milli)
        gpus = np.zeros_like(self.model_free_gpus)
        np.add.at(
            milli,
            self.model_of_node[has],
            np.where(self.gpu_free >= 0, self.gpu_free, 0)[has].sum(axis=1),
        )
        np.add.at(gpus, self.model_of_node[has], self.full_free[has])
        assert np.array_equal(milli, self.model_free_milli)
        assert np.array_equal(gpus, self.model_free_gpus)
        for (n, p), slots in self.mig_slots.items():
            assert len(slots) == self.mig_free[n, p]
        free_node = self._node_is_free().astype(np.int64)
        for index in self.domains.values():
            known = index.of_node >= 0
            d = len(index.names)
            assert np.array_equal(
                index.free_gpus,
                np.bincount(index.of_node[known], self.full_free[known], d).astype(np.int64),
            )
            assert np.array_equal(
                index.free_nodes,
                np.bincount(index.of_node[known], free_node[known], d).astype(np.int64),
            )

    def state(self) -> tuple[object, ...]:
        """Every mutable array and index, for exact equality checks in tests."""
        return (
            self.cpu_free.tobytes(),
            self.mem_free.tobytes(),
            self.gpu_free.tobytes(),
            self.replica_free.tobytes(),
            self.full_free.tobytes(),
            self.model_free_gpus.tobytes(),
            self.model_free_milli.tobytes(),
            self.mig_free.tobytes(),
            self.max_free.tobytes(),
            self.replica_sum.tobytes(),
            self.mig_total.tobytes(),
            self.mig_sum.tobytes(),
            tuple(sorted((key, tuple(v)) for key, v in self.mig_slots.items())),
            tuple(
                (level.value, idx.free_gpus.tobytes(), idx.free_nodes.tobytes())
                for level, idx in self.domains.items()
            ),
        )

    def copy(self) -> Snapshot:
        """An independent copy of the mutable state (static parts are shared)."""
        return Snapshot(
            names=self.names,
            cpu_total=self.cpu_total,
            mem_total=self.mem_total,
            cpu_free=self.cpu_free.copy(),
            mem_free=self.mem_free.copy(),
            gpu_count=self.gpu_count,
            gpu_free=self.gpu_free.copy(),
            replica_total=self.replica_total,
            replica_free=self.replica_free.copy(),
            model_names=self.model_names,
            model_of_node=self.model_of_node,
            full_free=self.full_free.copy(),
            whole_gpus=self.whole_gpus,
            model_free_gpus=self.model_free_gpus.copy(),
            model_free_milli=self.model_free_milli.copy(),
            profile_names=self.profile_names,
            mig_free=self.mig_free.copy(),
            mig_slots={key: list(v) for key, v in self.mig_slots.items()},
            mig_profile_of=self.mig_profile_of,
            domains={
                level: _DomainIndex(
                    idx.names,
                    idx.of_node,
                    idx.free_gpus.copy(),
                    idx.free_nodes.copy(),
                    idx.total_gpus,
                    idx.nodes,
                )
                for level, idx in self.domains.items()
            },
            labels=self.labels,
            taints=self.taints,
            tainted=self.tainted,
            gpu_uuids=self.gpu_uuids,
            version=self.version.copy(),
            max_free=self.max_free.copy(),
            replica_sum=self.replica_sum.copy(),
            mig_total=self.mig_total.copy(),
            mig_sum=self.mig_sum.copy(),
            _label_index=self._label_index,
            _name_index=self._name_index,
            _static_masks=self._static_masks,
        )


def node_labels(node: Node) -> dict[str, str]:
    """The labels a flavor's ``nodeLabels`` and a pod's selector match: the node's own, its
    topology's, and its hostname."""
    labels = dict(node.labels)
    labels.update(node.topology.labels())
    labels.setdefault(Level.HOSTNAME.value, node.name)
    return labels


def build_snapshot(nodes: Iterable[Node]) -> Snapshot:
    """Shorthand for :meth:`Snapshot.from_nodes`."""
    return Snapshot.from_nodes(list(nodes))
