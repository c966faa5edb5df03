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

The fleet changes in place (:meth:`Snapshot.add_nodes`, :meth:`Snapshot.remove_node`,
:meth:`Snapshot.set_taints`, :meth:`Snapshot.replace_node`), in O(the changed node + one copy of
the per-node arrays), never a rebuild: a node index stays the node's for as long as it is in the
fleet, so reservations held elsewhere (an engine's placements) stay valid. A removed node leaves
a *hole*: its slot holds nothing (no capacity, no domain, ``live`` False, never eligible) until
an added node takes it. Parts that copies share (names, labels, static arrays, caches) are
replaced, never written, so a copy never sees another snapshot's fleet change.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuaas.engine.nics import NicIndex
from gpuaas.model.devices import PartitionMode
from gpuaas.model.errors import GpuaasError, InvalidValue
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
    ``(gpu_slot, count)``; ``devices`` names the devices taken, as a DRA allocation would;
    ``nics`` lists ``(nic_slot, vf)`` into the node's NICs (:mod:`gpuaas.engine.nics`).
    """

    node: int
    cpu_milli: int = 0
    memory_bytes: int = 0
    gpu_milli: tuple[tuple[int, int], ...] = ()
    mig: tuple[tuple[int, int], ...] = ()
    replicas: tuple[tuple[int, int], ...] = ()
    devices: tuple[str, ...] = ()
    nics: tuple[tuple[int, int], ...] = ()

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
    ids: dict[str, int] = field(default_factory=dict)  # name -> domain id

    def __post_init__(self) -> None:
        if not self.ids and self.names:
            self.ids = {name: d for d, name in enumerate(self.names)}


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
    #: int64[N, P]: MIG instances per node and profile, free or not (static): which nodes
    #: could ever hold a profile, and whether a node holds any reservation.
    mig_capacity: np.ndarray = field(default_factory=lambda: np.zeros((0, 1), dtype=np.int64))
    #: bool[N]: the slot holds a node (False: a removed node's slot, free for the next add).
    live: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    #: Removed nodes' slots, reused by :meth:`add_nodes` lowest first.
    holes: list[int] = field(default_factory=list)
    #: Unique per snapshot object and layout (copies and layout changes get their own), so
    #: policy caches never mix snapshots.
    uid: int = field(default_factory=lambda: next(_UIDS))
    _label_index: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    _name_index: dict[str, int] = field(default_factory=dict)
    _capacity_milli: int = -1
    #: Static per-pod-kind node masks (GPU model, selector, taints), shared by copies.
    _static_masks: dict[tuple[object, ...], np.ndarray | None] = field(default_factory=dict)
    #: Whether static parts may be shared with a copy (then a fleet change copies them first).
    _shared: bool = False
    #: The RDMA NICs and their free VFs (:mod:`gpuaas.engine.nics`); empty without NICs.
    nics: NicIndex = field(default_factory=NicIndex)
    #: The journal of changed nodes: every move of ``version`` appends the node's index, so a
    #: cache that remembers :meth:`tick` learns which nodes moved since from the entries after
    #: it (:meth:`changed_since`), not from a compare of the whole version array. Only its
    #: recent part is kept (``_journal_start`` is the tick of its first entry).
    _journal: list[int] = field(default_factory=list)
    _journal_start: int = 0
    #: The change lists of watchers (:meth:`watch`), by *watch class*: one tuple of lists per
    #: set of watches some node is in (class 0: none). A reservation or release on node ``n``
    #: appends ``n`` to each list of its class, so a count kept for one pod kind learns of the
    #: changes on its own nodes only, not of every change in the fleet. Empty until the first
    #: watch; dropped with every layout change.
    _watch_sets: list[tuple[list[int], ...]] = field(default_factory=list)
    #: int64[N] once anything watches: each node's watch class (an index into ``_watch_sets``),
    #: so that a watch is set up over many nodes with a few vector operations.
    _watch_class: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    #: Counts kept beside this snapshot that watch it, by their owner's key (e.g. a pod kind):
    #: owned by :mod:`gpuaas.engine.domain_counts` and :mod:`gpuaas.engine.share_counts`,
    #: dropped with the watches on a layout change (the counts then start afresh).
    watchers: dict[object, object] = field(default_factory=dict)

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
        snap.live = np.ones(n, dtype=bool)
        snap.mig_capacity = mig_free.copy()
        snap.max_free = gpu_free.max(axis=1)
        snap.replica_sum = snap.replica_free.sum(axis=1)
        snap.mig_total = mig_free.sum(axis=0)
        snap.mig_sum = mig_free.sum(axis=1)
        snap.nics = NicIndex.build(nodes)
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
        return _DomainIndex(list(ids), of_node, free_gpus, free_nodes, total, count, ids)

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

    def reserve_copies(self, node: int, assignment: Assignment, copies: int) -> None:
        """:meth:`reserve` of a CPU-and-memory-only ``assignment`` ``copies`` times, in one go
        (the bulk fill of identical device-less pods, :mod:`gpuaas.engine.bulk`): the snapshot,
        versions and journal included, ends exactly as after that many calls, and each copy is
        given back by its own :meth:`unreserve`. Raises OvercommitError (changing nothing) if
        they do not all fit, ValueError for an assignment that holds devices."""
        a = assignment
        if a.gpu_milli or a.mig or a.replicas or a.nics or a.devices:
            raise ValueError("reserve_copies takes a CPU-and-memory-only assignment")
        if a.node != node:
            raise OvercommitError(f"assignment is for node {a.node}, not {node}")
        if copies * a.cpu_milli > self.cpu_free[node] or (
            copies * a.memory_bytes > self.mem_free[node]
        ):
            raise OvercommitError(f"{self.names[node]}: insufficient cpu or memory")
        self.version[node] += copies
        self._journal.extend([node] * copies)
        if len(self._journal) > _JOURNAL_MAX:
            self._trim_journal()
        self.cpu_free[node] -= copies * a.cpu_milli
        self.mem_free[node] -= copies * a.memory_bytes
        if self._watch_sets:
            self._tell(node)

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
        if a.nics and (why := self.nics.check(n, a.nics)) is not None:
            raise OvercommitError(f"{self.names[n]}: {why}")

    def _apply(self, a: Assignment, sign: int) -> None:
        n = a.node
        self.version[n] += 1  # as _moved(n), inline: this is every reservation's path
        self._journal.append(n)
        if len(self._journal) > _JOURNAL_MAX:
            self._trim_journal()
        if a.nics:
            self.nics.apply(n, a.nics, sign)
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
        if self._watch_sets:
            self._tell(n)
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

    # ------------------------------------------------------------------ watches
    def watch(self, nodes: np.ndarray) -> list[int]:
        """A new change list for ``nodes`` (int node indices): from now on every reservation
        and release on one of them appends the node's index to it (at most :data:`WATCH_CAP`
        entries: a reader finding it that full re-counts every node instead). The reader
        empties it; :meth:`unwatch` ends it. A layout change (nodes added, removed,
        repartitioned, taints) ends every watch, as it gives the snapshot a new uid.

        Why beside the journal: the journal lists every change in the fleet, so a count kept
        for pods that fit a few nodes (a MIG profile, time-sliced replicas) still sifts through
        all of them; a watch lists only the changes on the nodes it was given."""
        dirty: list[int] = []
        if not self._watch_sets:
            self._watch_sets = [()]
            self._watch_class = np.zeros(self.size, dtype=np.int64)
        self._regroup(nodes, lambda old: (*old, dirty))
        return dirty

    def unwatch(self, dirty: list[int], nodes: np.ndarray) -> None:
        """End the watch :meth:`watch` returned ``dirty`` for, on the same ``nodes``."""
        if self._watch_sets:  # else a layout change ended it already
            self._regroup(nodes, lambda old: tuple(d for d in old if d is not dirty))
        dirty.clear()

    def _regroup(
        self, nodes: np.ndarray, change: Callable[[tuple[list[int], ...]], tuple[list[int], ...]]
    ) -> None:
        """Move ``nodes`` to the watch classes ``change`` makes of theirs: one new class per
        class among them (O(nodes) in numpy, O(classes) in Python). Classes no node is in any
        more are dropped once they outnumber the live ones."""
        sets = self._watch_sets
        old, inverse = np.unique(self._watch_class[nodes], return_inverse=True)
        first = len(sets)
        sets.extend(change(sets[c]) for c in old.tolist())
        self._watch_class[nodes] = first + inverse.reshape(-1)
        if len(sets) > 64 + 4 * len(old):
            used, compact = np.unique(self._watch_class, return_inverse=True)
            if len(used) * 2 < len(sets):
                self._watch_sets = [sets[c] for c in used.tolist()]
                self._watch_class = compact.reshape(-1).astype(np.int64)

    def _tell(self, n: int) -> None:
        """Node ``n`` changed: append it to every change list watching it."""
        for dirty in self._watch_sets[self._watch_class[n]]:
            if len(dirty) < WATCH_CAP:
                dirty.append(n)

    # ------------------------------------------------------------------ the journal
    def _moved(self, n: int) -> None:
        """Node ``n`` changed: its version moves, and the journal says so."""
        self.version[n] += 1
        self._journal.append(n)
        if len(self._journal) > _JOURNAL_MAX:
            self._trim_journal()

    def _trim_journal(self) -> None:
        """Drop the older half: a cache that read nothing for that long compares versions."""
        drop = len(self._journal) // 2
        del self._journal[:drop]
        self._journal_start += drop

    def tick(self) -> int:
        """The journal's position now: :meth:`changed_since` of it lists later changes."""
        return self._journal_start + len(self._journal)

    def changed_since(self, tick: int) -> np.ndarray | None:
        """The nodes (ascending, each once, int64) whose version moved after :meth:`tick`
        returned ``tick``; exactly ``np.flatnonzero(version != seen)`` for the versions ``seen``
        at that tick, since versions only move forward. None when the journal no longer
        reaches back that far, or when so many changes came since that comparing the versions
        is cheaper (measured: deduping costs ~0.1 us an entry, the compare ~15 us at 25,000
        nodes); the caller compares them then."""
        start = tick - self._journal_start
        if start < 0:
            return None
        count = len(self._journal) - start
        if count > 16 and count * _JOURNAL_COMPARE > len(self.version):
            return None
        return np.array(sorted(set(self._journal[start:])), dtype=np.int64)

    def moved_since(self, tick: int, seen: np.ndarray) -> tuple[np.ndarray, int]:
        """The nodes whose version moved since ``tick`` (read from the journal, or by comparing
        the versions ``seen`` then when the journal cannot say), with ``seen`` brought up to
        date in place, and the tick to pass next time: the one way every count kept beside the
        snapshot learns what changed."""
        changed = self.changed_since(tick)
        if changed is None:
            changed = np.flatnonzero(self.version != seen)
        seen[changed] = self.version[changed]
        return changed, self.tick()

    # ------------------------------------------------------------------ fleet changes
    def add_nodes(self, nodes: Sequence[Node]) -> np.ndarray:
        """Add ``nodes`` (fully free) to the fleet; returns their node indices (int64), in order.

        Removed nodes' slots are reused lowest first, then the arrays grow by the rest. New GPU
        models, MIG profiles and topology domains get new ids (existing ids never change), so
        every index held elsewhere stays valid. Cost: one copy of the per-node arrays plus the
        new nodes, never a rebuild. A name already in the fleet (or twice in ``nodes``) is an
        InvalidValue and changes nothing.
        """
        if not nodes:
            return np.zeros(0, dtype=np.int64)
        seen: set[str] = set()
        for node in nodes:
            if node.name in self._name_index or node.name in seen:
                raise InvalidValue(f"node {node.name}", "name is already in the fleet")
            seen.add(node.name)
        part = Snapshot.from_nodes(nodes)
        self._detach()
        slots = self.holes[: len(nodes)]
        self.holes = self.holes[len(slots) :]
        grow = len(nodes) - len(slots)
        if grow:
            first = self.size
            self._grow_rows(grow)
            slots.extend(range(first, first + grow))
        self._write_part(part, slots)
        for node, slot in zip(nodes, slots, strict=True):
            self.nics.set_node(slot, node)
        return np.array(slots, dtype=np.int64)

    def remove_node(self, node: int) -> None:
        """Take node ``node`` out of the fleet, leaving a hole (see the module docstring).

        The node must hold no reservation (the caller gives back, or requeues, what runs there
        first): an OvercommitError otherwise, changing nothing."""
        self._require_free(node, "remove")
        self._detach()
        self._clear_row(node)
        self._layout_changed()

    def replace_node(self, node: int, new: Node) -> None:
        """Give slot ``node`` the facts of ``new`` (a repartition: MIG/MPS/time-slice layout,
        or any other change of capacity, labels or topology); same name or a free one.

        The slot must hold no reservation (the caller releases the pods there first and
        reserves again those whose devices still exist): an OvercommitError otherwise."""
        if new.name != self.names[node] and new.name in self._name_index:
            raise InvalidValue(f"node {new.name}", "name is already in the fleet")
        self._require_free(node, "repartition")
        part = Snapshot.from_nodes([new])
        self._detach()
        self._clear_row(node)
        self.holes.remove(node)
        self._write_part(part, [node])
        self.nics.set_node(node, new)

    def _write_part(self, part: Snapshot, slots: list[int]) -> None:
        """Write ``part`` (a snapshot of new nodes) into empty ``slots``, one node each: its
        models, profiles and domains get this snapshot's ids (new ones appended)."""
        models = self._map_names("model", part.model_names)
        profiles = self._map_names("profile", part.profile_names)
        if part.gmax > self.gmax:
            self._grow_gpu_columns(part.gmax)
        levels = {
            level: self._map_domains(level, part.domains[level].names) for level in DOMAIN_LEVELS
        }
        for j, slot in enumerate(slots):
            self._write_row(slot, part, j, models, profiles, levels)
        self._layout_changed()

    def set_taints(self, node: int, taints: Sequence[Taint]) -> None:
        """Replace node ``node``'s taints (a cordon adds the unschedulable taint, an uncordon
        removes it); reservations there stay, only new placements see the change."""
        if not self.live[node]:
            raise InvalidValue(f"node {node}", "is not in the fleet")
        self.taints = list(self.taints)
        self.taints[node] = tuple(taints)
        tainted = set(self.tainted.tolist())
        if taints:
            tainted.add(node)
        else:
            tainted.discard(node)
        self.tainted = np.array(sorted(tainted), dtype=np.int64)
        self._moved(node)
        self._layout_changed()

    def devices_kept(self, assignment: Assignment, new: Node) -> bool:
        """Whether every device ``assignment`` holds on its node still exists, in the same form,
        in ``new`` (the node's next layout; call before :meth:`replace_node`): the same GPU
        (uuid) still whole for a share or whole GPU, the same MIG instance index with the same
        profile, a time-sliced/MPS GPU still with as many replicas. CPU and memory are checked
        when the assignment is reserved again."""
        n = assignment.node
        uuids = self.gpu_uuids[n]
        gpus = new.gpus

        def same(g: int) -> bool:
            return g < len(gpus) and g < len(uuids) and gpus[g].uuid == uuids[g]

        for g, _ in assignment.gpu_milli:
            if not same(g) or gpus[g].partition.mode is not PartitionMode.WHOLE:
                return False
        for g, k in assignment.mig:
            if not same(g) or gpus[g].partition.mode is not PartitionMode.MIG:
                return False
            instances = gpus[g].partition.instances
            old = self.profile_names[self.mig_profile_of[(n, g, k)]]
            if k >= len(instances) or instances[k].profile != old:
                return False
        for g, count in assignment.replicas:
            if not same(g) or not gpus[g].partition.shared or gpus[g].partition.replicas < count:
                return False
        old_nics = self.nics.nics.get(n, ())
        for j, vf in assignment.nics:
            if j >= len(new.nics) or j >= len(old_nics) or new.nics[j].name != old_nics[j].name:
                return False
            if vf >= new.nics[j].vfs or new.nics[j].pool != old_nics[j].pool:
                return False
        return True

    def holds_reservation(self, node: int) -> bool:
        """Whether anything is reserved on node ``node`` (cpu, memory or a device)."""
        n = node
        if self.cpu_free[n] != self.cpu_total[n] or self.mem_free[n] != self.mem_total[n]:
            return True
        row = self.gpu_free[n]
        if bool(((row >= 0) & (row != MILLI)).any()):
            return True
        if not np.array_equal(self.replica_free[n], self.replica_total[n]):
            return True
        if self.nics.holds_reservation(n):
            return True
        return not np.array_equal(self.mig_free[n], self.mig_capacity[n])

    def _require_free(self, node: int, action: str) -> None:
        if not 0 <= node < self.size or not self.live[node]:
            raise InvalidValue(f"node {node}", "is not in the fleet")
        if self.holds_reservation(node):
            raise OvercommitError(f"cannot {action} node {self.names[node]}: it holds reservations")

    def _detach(self) -> None:
        """Own every part copies share before a fleet change writes it (copy-on-write; free
        when this snapshot was never copied)."""
        if not self._shared:
            return
        self._shared = False
        self.names = list(self.names)
        self.labels = list(self.labels)
        self.taints = list(self.taints)
        self.gpu_uuids = list(self.gpu_uuids)
        self.model_names = list(self.model_names)
        self.profile_names = list(self.profile_names)
        self._name_index = dict(self._name_index)
        self.mig_profile_of = dict(self.mig_profile_of)
        for name in _STATIC_ROWS:
            setattr(self, name, getattr(self, name).copy())
        self.domains = {
            level: _DomainIndex(
                list(idx.names),
                idx.of_node.copy(),
                idx.free_gpus,
                idx.free_nodes,
                idx.total_gpus.copy(),
                idx.nodes.copy(),
                dict(idx.ids),
            )
            for level, idx in self.domains.items()
        }

    def _layout_changed(self) -> None:
        """Static facts changed: caches keyed by layout start afresh (new uid, new names list
        for topology's per-layout cache, new mask caches)."""
        self.uid = next(_UIDS)
        self.names = list(self.names)  # topology's per-layout caches key on this list
        self._watch_sets = []  # every watch ends: what it counted no longer holds
        self._watch_class = np.zeros(0, dtype=np.int64)
        self.watchers = {}
        self._label_index = {}
        self._static_masks = {}
        self._capacity_milli = -1

    def _grow_rows(self, count: int) -> None:
        """Append ``count`` empty rows to every per-node array (:meth:`add_nodes` fills them
        at once, so they are never listed as holes)."""

        def grown(array: np.ndarray, fill: int | bool) -> np.ndarray:
            extra = np.full((count, *array.shape[1:]), fill, dtype=array.dtype)
            return np.concatenate([array, extra])

        for name, fill in _HOLE_FILL.items():
            setattr(self, name, grown(getattr(self, name), fill))
        for idx in self.domains.values():
            idx.of_node = grown(idx.of_node, -1)
        self.names.extend([""] * count)
        self.labels.extend({} for _ in range(count))
        self.taints.extend(() for _ in range(count))
        self.gpu_uuids.extend([] for _ in range(count))
        self.nics.grow(count)

    def _grow_gpu_columns(self, gmax: int) -> None:
        extra = gmax - self.gmax
        n = self.size
        self.gpu_free = np.hstack([self.gpu_free, np.full((n, extra), -1, dtype=np.int64)])
        self.replica_total = np.hstack([self.replica_total, np.zeros((n, extra), np.int64)])
        self.replica_free = np.hstack([self.replica_free, np.zeros((n, extra), np.int64)])

    def _map_names(self, kind: str, names: list[str]) -> list[int]:
        """Ids in this snapshot of a part's model or profile names, adding the unknown ones."""
        own = self.model_names if kind == "model" else self.profile_names
        ids: list[int] = []
        for name in names:
            try:
                ids.append(own.index(name))
            except ValueError:
                own.append(name)
                ids.append(len(own) - 1)
        if kind == "model":
            grow = len(own) - len(self.model_free_gpus)
            if grow > 0:
                self.model_free_gpus = np.concatenate(
                    [self.model_free_gpus, np.zeros(grow, np.int64)]
                )
                self.model_free_milli = np.concatenate(
                    [self.model_free_milli, np.zeros(grow, np.int64)]
                )
        else:
            grow = len(own) - self.mig_free.shape[1]
            if grow > 0:
                extra = np.zeros((self.size, grow), np.int64)
                self.mig_free = np.hstack([self.mig_free, extra])
                self.mig_capacity = np.hstack([self.mig_capacity, extra])
                self.mig_total = np.concatenate([self.mig_total, np.zeros(grow, np.int64)])
        return ids

    def _map_domains(self, level: Level, names: list[str]) -> list[int]:
        index = self.domains[level]
        ids: list[int] = []
        known = index.ids
        for name in names:
            d = known.get(name)
            if d is None:
                d = len(index.names)
                index.names.append(name)
                known[name] = d
            ids.append(d)
        grow = len(index.names) - len(index.free_gpus)
        if grow > 0:
            zeros = np.zeros(grow, dtype=np.int64)
            index.free_gpus = np.concatenate([index.free_gpus, zeros])
            index.free_nodes = np.concatenate([index.free_nodes, zeros])
            index.total_gpus = np.concatenate([index.total_gpus, zeros])
            index.nodes = np.concatenate([index.nodes, zeros])
        return ids

    def _write_row(
        self,
        n: int,
        part: Snapshot,
        j: int,
        models: list[int],
        profiles: list[int],
        levels: dict[Level, list[int]],
    ) -> None:
        """Fill hole ``n`` with row ``j`` of ``part`` (a snapshot of the new nodes, fully
        free), its model/profile/domain ids mapped to this snapshot's, and add it to every
        aggregate index."""
        g = part.gmax
        self.names[n] = part.names[j]
        self._name_index[part.names[j]] = n
        self.labels[n] = part.labels[j]
        self.taints[n] = part.taints[j]
        self.gpu_uuids[n] = part.gpu_uuids[j]
        for name in ("cpu_total", "mem_total", "cpu_free", "mem_free", "gpu_count"):
            getattr(self, name)[n] = getattr(part, name)[j]
        for name in ("full_free", "whole_gpus", "max_free", "replica_sum", "mig_sum"):
            getattr(self, name)[n] = getattr(part, name)[j]
        self.gpu_free[n, :] = -1
        self.gpu_free[n, :g] = part.gpu_free[j]
        self.replica_total[n, :] = 0
        self.replica_total[n, :g] = part.replica_total[j]
        self.replica_free[n, :] = 0
        self.replica_free[n, :g] = part.replica_free[j]
        model = int(part.model_of_node[j])
        self.model_of_node[n] = models[model] if model >= 0 else -1
        if model >= 0:
            self.model_free_gpus[models[model]] += int(part.full_free[j])
            self.model_free_milli[models[model]] += int(part.full_free[j]) * MILLI
        self.mig_free[n, :] = 0
        self.mig_capacity[n, :] = 0
        for p, count in enumerate(part.mig_free[j].tolist()):
            if count:
                self.mig_free[n, profiles[p]] = count
                self.mig_capacity[n, profiles[p]] = count
                self.mig_total[profiles[p]] += count
                self.mig_slots[(n, profiles[p])] = list(part.mig_slots[(j, p)])
        for (jj, gg, k), p in part.mig_profile_of.items():
            if jj == j:
                self.mig_profile_of[(n, gg, k)] = profiles[p]
        self.live[n] = True
        self._moved(n)
        if self.taints[n]:
            self.tainted = np.union1d(self.tainted, [n]).astype(np.int64)
        free_node = int(self.node_is_free(n))
        for level, index in self.domains.items():
            d_part = int(part.domains[level].of_node[j])
            d = levels[level][d_part] if d_part >= 0 else -1
            index.of_node[n] = d
            if d >= 0:
                index.free_gpus[d] += int(self.full_free[n])
                index.free_nodes[d] += free_node
                index.total_gpus[d] += int(self.whole_gpus[n])
                index.nodes[d] += 1

    def _clear_row(self, n: int) -> None:
        """Make slot ``n`` (fully free) a hole: out of every aggregate index, nothing left."""
        model = int(self.model_of_node[n])
        if model >= 0:
            self.model_free_gpus[model] -= int(self.full_free[n])
            self.model_free_milli[model] -= int(self.full_free[n]) * MILLI
        free_node = int(self.node_is_free(n))
        for index in self.domains.values():
            d = int(index.of_node[n])
            if d >= 0:
                index.free_gpus[d] -= int(self.full_free[n])
                index.free_nodes[d] -= free_node
                index.total_gpus[d] -= int(self.whole_gpus[n])
                index.nodes[d] -= 1
                index.of_node[n] = -1
        for p, count in enumerate(self.mig_free[n].tolist()):
            if count:
                self.mig_total[p] -= count
                for g, k in self.mig_slots.pop((n, p), []):
                    self.mig_profile_of.pop((n, g, k), None)
        self._name_index.pop(self.names[n], None)
        self.nics.clear_node(n)
        self.names[n] = ""
        self.labels[n] = {}
        self.taints[n] = ()
        self.gpu_uuids[n] = []
        if n in self.tainted:
            self.tainted = self.tainted[self.tainted != n]
        for name, fill in _HOLE_FILL.items():
            if name != "version":  # versions only move forward (policy caches compare them)
                getattr(self, name)[n] = fill
        self._moved(n)
        self.live[n] = False
        self.holes.append(n)
        self.holes.sort()

    # ------------------------------------------------------------------ comparison (tests)
    def canonical(self) -> dict[str, object]:
        """The fleet's state keyed by names, not slots (for tests: a snapshot changed in place
        equals one built from scratch for the same fleet and reservations, whatever the slot
        order). Per live node every row; per GPU model, MIG profile and non-empty domain the
        aggregates."""
        rows: dict[str, object] = {}
        for n in np.flatnonzero(self.live).tolist():
            g = int(self.gpu_count[n])
            model = int(self.model_of_node[n])
            rows[self.names[n]] = (
                int(self.cpu_total[n]),
                int(self.mem_total[n]),
                int(self.cpu_free[n]),
                int(self.mem_free[n]),
                tuple(self.gpu_free[n, :g].tolist()),
                tuple(self.replica_total[n, :g].tolist()),
                tuple(self.replica_free[n, :g].tolist()),
                self.model_names[model] if model >= 0 else "",
                int(self.full_free[n]),
                int(self.whole_gpus[n]),
                int(self.max_free[n]),
                int(self.replica_sum[n]),
                int(self.mig_sum[n]),
                tuple(
                    sorted(
                        (self.profile_names[p], c)
                        for p, c in enumerate(self.mig_free[n].tolist())
                        if c
                    )
                ),
                tuple(
                    sorted(
                        (self.profile_names[p], tuple(slots))
                        for (m, p), slots in self.mig_slots.items()
                        if m == n and slots
                    )
                ),
                tuple(sorted(self.labels[n].items())),
                self.taints[n],
                tuple(self.gpu_uuids[n]),
                tuple(
                    (level.value, index.names[index.of_node[n]] if index.of_node[n] >= 0 else "")
                    for level, index in self.domains.items()
                ),
            )
        models = {
            name: (int(self.model_free_gpus[m]), int(self.model_free_milli[m]))
            for m, name in enumerate(self.model_names)
            if (self.model_of_node == m).any()
        }
        profiles = {
            name: int(self.mig_total[p])
            for p, name in enumerate(self.profile_names)
            if int(self.mig_free[:, p].sum()) or any(v == p for v in self.mig_profile_of.values())
        }
        domains = {
            (level.value, name): (
                int(index.free_gpus[d]),
                int(index.free_nodes[d]),
                int(index.total_gpus[d]),
                int(index.nodes[d]),
            )
            for level, index in self.domains.items()
            for d, name in enumerate(index.names)
            if index.nodes[d]
        }
        tainted = sorted(self.names[n] for n in self.tainted.tolist())
        return {
            "nodes": rows,
            "models": models,
            "profiles": profiles,
            "domains": domains,
            "tainted": tainted,
            "nics": self.nics.canonical(self.names),
        }

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
        self.nics.check_indexes()
        assert not any(n in self.nics.nics for n in self.holes)
        free_node = self._node_is_free().astype(np.int64)
        holes = np.flatnonzero(~self.live).tolist()
        assert sorted(self.holes) == holes
        assert not self.cpu_total[holes].any() and not self.whole_gpus[holes].any()
        assert not self.mig_capacity[holes].any() and not self.replica_total[holes].any()
        assert set(self._name_index.values()) == set(np.flatnonzero(self.live).tolist())
        assert set(self.tainted.tolist()) == {n for n, t in enumerate(self.taints) if t}
        for index in self.domains.values():
            known = index.of_node >= 0
            d = len(index.names)
            assert not known[holes].any()
            assert np.array_equal(
                index.total_gpus,
                np.bincount(index.of_node[known], self.whole_gpus[known], d).astype(np.int64),
            )
            assert np.array_equal(index.nodes, np.bincount(index.of_node[known], None, d))
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
            tuple(sorted((p, f.tobytes()) for p, f in self.nics.pool_free.items())),
            tuple(sorted((n, tuple(map(tuple, r))) for n, r in self.nics.free.items())),
        )

    def copy(self) -> Snapshot:
        """An independent copy of the mutable state (static parts are shared)."""
        self._shared = True
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
                    idx.ids,
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
            live=self.live,
            mig_capacity=self.mig_capacity,
            holes=list(self.holes),
            _label_index=self._label_index,
            _name_index=self._name_index,
            _static_masks=self._static_masks,
            _shared=True,
            nics=self.nics.copy(),
        )


#: Entries a watch's change list holds at most (:meth:`Snapshot.watch`): past this its reader
#: re-counts every node it watches, which costs about as much as reading that many entries.
WATCH_CAP = 4096


def drain(dirty: list[int]) -> list[int] | None:
    """Empty a watch's change list (:meth:`Snapshot.watch`) and say what it held: the changed
    nodes, ascending and each once, or None when it reached :data:`WATCH_CAP` (it stopped
    growing and missed later changes: its reader re-counts every node it watches)."""
    nodes = None if len(dirty) >= WATCH_CAP else sorted(set(dirty))
    dirty.clear()
    return nodes


#: Journal entries kept before the older half is dropped (a Python list of ints: ~2 MB).
_JOURNAL_MAX = 1 << 18
#: Past one journal entry per this many nodes, comparing the version array is cheaper than
#: reading the journal (:meth:`Snapshot.changed_since`).
_JOURNAL_COMPARE = 160

#: Per-node arrays and what a hole holds in them (see :meth:`Snapshot._grow_rows`).
_HOLE_FILL: dict[str, int | bool] = {
    "cpu_total": 0,
    "mem_total": 0,
    "cpu_free": 0,
    "mem_free": 0,
    "gpu_count": 0,
    "gpu_free": -1,
    "replica_total": 0,
    "replica_free": 0,
    "model_of_node": -1,
    "full_free": 0,
    "whole_gpus": 0,
    "mig_free": 0,
    "version": 0,
    "max_free": -1,
    "replica_sum": 0,
    "mig_sum": 0,
    "mig_capacity": 0,
    "live": False,
}
#: Per-node arrays that copies share (the rest each copy owns already).
_STATIC_ROWS = (
    "cpu_total",
    "mem_total",
    "gpu_count",
    "replica_total",
    "model_of_node",
    "whole_gpus",
    "mig_capacity",
    "live",
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
