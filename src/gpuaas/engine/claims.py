"""DRA-style device claims: ``count`` devices of a DeviceClass, CEL selectors, shared attributes.

A :class:`~gpuaas.model.workload.DeviceClaim` asks for ``count`` devices on the pod's node that
match its DeviceClass and its own selectors, are free, and (``match_attributes``) all share the
value of each named attribute, as DRA's ``matchAttribute`` constraint does (e.g. every GPU in one
NVLink domain).

Devices are not a second ledger beside the snapshot: each device is backed by what the snapshot
already counts (a whole GPU's 1000 milli, a MIG instance, a time-sliced replica), and an allocated
claim becomes ordinary ``gpu_milli`` / ``mig`` / ``replicas`` entries of the pod's
:class:`~gpuaas.engine.snapshot.Assignment`, plus the device names in ``devices``. So a device can
never be given twice, whether to a claim or to a plain ``nvidia.com/gpu`` request, and unreserve
gives it back exactly. Time-sliced replicas of one GPU are interchangeable; the one named is the
next unused replica.

Cost: CEL is slow (hundreds of microseconds per evaluation), and devices' attributes never change,
so a selector's verdict is cached per distinct value of the attributes it reads (a selector on
``productName`` is evaluated once per product, not once per device). Per (class, selectors,
match_attributes) the matching devices of the whole fleet become flat arrays, built once; the
per-decision filter is then a few numpy operations over those arrays.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from gpuaas.engine.framework import ScorePlugin
from gpuaas.engine.place import NodeSampling, Placement, Unschedulable, place_pod
from gpuaas.engine.reasons import Code, Reason
from gpuaas.engine.snapshot import MILLI, Assignment, Snapshot
from gpuaas.model.devices import Device, PartitionMode
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Node
from gpuaas.model.workload import DeviceClaim, PodRequest
from gpuaas.supply.device_class import DeviceClass
from gpuaas.supply.devices import publish_devices

_KIND_GPU, _KIND_MIG, _KIND_SHARED = 0, 1, 2
_KINDS = {"gpu": _KIND_GPU, "mig": _KIND_MIG, "shared": _KIND_SHARED}
_MISSING = object()
# attributes["domain"].name / attributes["domain"]["name"] (and capacity); a bare
# attributes["domain"] (e.g. ``"profile" in device.attributes[...]``) reads the key set.
_ACCESS = re.compile(
    r"\b(?P<kind>attributes|capacity)\s*\[\s*(?P<q>[\"'])(?P<domain>[^\"']*)(?P=q)\s*\]"
    r"(?:\s*\.\s*(?P<dot>[A-Za-z_][A-Za-z0-9_]*)(?!\s*\()|\s*\[\s*[\"'](?P<idx>[^\"']*)[\"']\s*\])?"
)
_WORD = re.compile(r"\b(?:attributes|capacity)\b")
#: Retries of one pod when a node passed the vectorised (upper-bound) claim filter but its exact
#: allocation failed (MIG instances, several claims competing for the same devices).
MAX_NODE_RETRIES = 8


def _lookup(values: Mapping[str, object], driver: str, domain: str, name: str) -> object:
    if domain == driver and name in values:
        return values[name]
    return values.get(f"{domain}/{name}", _MISSING)


def _domain_keys(values: Mapping[str, object], driver: str, domain: str) -> frozenset[str]:
    keys = set()
    for key in values:
        dom, _, name = key.rpartition("/")
        if (dom or driver) == domain:
            keys.add(name)
    return frozenset(keys)


@dataclass(frozen=True, slots=True)
class _SelectorReads:
    """What a set of CEL selectors reads from a device: the cache key of their verdict."""

    accesses: tuple[tuple[str, str, str | None], ...]  # (kind, domain, name or None = key set)
    everything: bool  # a form we do not recognise: key on the whole device

    @classmethod
    def of(cls, expressions: Iterable[str]) -> _SelectorReads:
        accesses: set[tuple[str, str, str | None]] = set()
        everything = False
        for expression in expressions:
            found = list(_ACCESS.finditer(expression))
            if len(found) != len(_WORD.findall(expression)):
                everything = True
            for match in found:
                accesses.add((match["kind"], match["domain"], match["dot"] or match["idx"]))
        return cls(tuple(sorted(accesses, key=repr)), everything)

    def key(self, device: Device) -> tuple[object, ...]:
        if self.everything:
            return (
                device.driver,
                tuple(sorted(device.attributes.items())),
                tuple(sorted(device.capacity.items())),
            )
        out: list[object] = [device.driver]
        for kind, domain, name in self.accesses:
            values: Mapping[str, object] = (
                device.attributes if kind == "attributes" else device.capacity
            )
            if name is None:
                out.append(_domain_keys(values, device.driver, domain))
            else:
                value = _lookup(values, device.driver, domain, name)
                # The value itself (str, int, bool or Quantity: all hashable); its type too,
                # since True == 1 for a dict key.
                out.append(None if value is _MISSING else value)
                out.append(type(value))
        return tuple(out)


@dataclass(slots=True)
class _ClaimIndex:
    """Every fleet device matching one (class, selectors, match_attributes), as flat arrays.

    Devices are sorted by node; ``pair`` groups a node's devices that share the matched
    attributes (one group per node without ``match_attributes``).
    """

    node: np.ndarray  # int64[K]
    kind: np.ndarray  # int8[K]
    slot: np.ndarray  # int64[K] GPU slot in the snapshot
    inst: np.ndarray  # int64[K] MIG instance index / replica number
    profile: np.ndarray  # int64[K] MIG profile id in the snapshot (-1 otherwise)
    pair: np.ndarray  # int64[K]
    pair_node: np.ndarray  # int64[P], non-decreasing
    names: list[str]  # device names, qualified driver/pool/device
    node_start: np.ndarray  # int64[N + 1]: the node's devices are [start[n], start[n + 1])
    pair_starts: np.ndarray  # int64: first pair of each node that has pairs
    pair_nodes: np.ndarray  # int64: those nodes
    has_mig: bool
    #: Every matching device is a whole GPU (no MIG instance, no time-sliced replica).
    whole_only: bool
    #: Fast path when every matching device is a whole GPU and each node has at most one group:
    #: bool[N, G], True where GPU slot g of node n is a matching device (None otherwise).
    dense: np.ndarray | None = None


#: Device attributes whose values differ between nodes of the same hardware signature (see
#: :func:`_signature`). Selectors reading them are evaluated on each node's own devices; for
#: ``match_attributes`` only their equality pattern within a node matters, and that pattern is
#: the same for every node of a signature (one NVLink domain per node, one UUID per GPU).
NODE_SPECIFIC_ATTRIBUTES = frozenset({"uuid", "parentUUID", "nvlinkDomain"})

_Row = tuple[int, int, int, int, int, str]  # kind, slot, inst, profile, group, device name


def _signature(node: Node) -> tuple[object, ...]:
    """What a node's published devices depend on, apart from its name, its GPUs' UUIDs and its
    NVLink domain's name: nodes with equal signatures publish the same devices up to those."""
    return (
        tuple(
            (g.index, g.model, g.memory_mib, g.partition, g.numa_node, g.pcie_root)
            for g in node.gpus
        ),
        bool(node.topology.nvlink_domain),
        node.labels.get("nvidia.com/cuda.driver-version.full", ""),
        node.labels.get("gpuaas.io/driver-version", ""),
    )


class _IndexBuilder:
    """Accumulates one :class:`_ClaimIndex` while the fleet's nodes stream past.

    Matching devices are worked out once per node signature from a template node's devices
    (selector verdicts, groups, snapshot slots) and then stamped onto every node of that
    signature, unless the selectors read a node-specific attribute, in which case each node's
    own devices are matched (the CEL verdict cache still applies).
    """

    def __init__(self, claim: DeviceClaim, tests: list[DeviceClass], nodes: int) -> None:
        self.claim = claim
        self.tests = tests
        self.reads = [_SelectorReads.of(t.selectors) for t in tests]
        self.per_node = any(
            r.everything or any(name in NODE_SPECIFIC_ATTRIBUTES for _, _, name in r.accesses)
            for r in self.reads
        )
        self.rows_of: dict[tuple[object, ...], list[_Row]] = {}
        self.node: list[int] = []
        self.kind: list[int] = []
        self.slot: list[int] = []
        self.inst: list[int] = []
        self.profile: list[int] = []
        self.pair: list[int] = []
        self.pair_node: list[int] = []
        self.names: list[str] = []
        self.node_start = np.zeros(nodes + 1, dtype=np.int64)

    def rows(
        self, owner: DeviceClaims, snap: Snapshot, node: Node, devices: Sequence[Device]
    ) -> list[_Row]:
        """The node's matching devices as rows (group ids are local to the node)."""
        slot_of = {gpu.index: s for s, gpu in enumerate(node.gpus)}
        groups: dict[tuple[object, ...], int] = {}
        out: list[_Row] = []
        for device in devices:
            if not all(
                owner._matches(t, r, device) for t, r in zip(self.tests, self.reads, strict=True)
            ):
                continue
            values = tuple(
                _lookup(device.attributes, device.driver, *_split(name, device.driver))
                for name in self.claim.match_attributes
            )
            if any(value is _MISSING for value in values):
                continue  # a device without the attribute cannot satisfy matchAttribute
            slot = slot_of[device.gpu_index]
            gpu = node.gpus[slot]
            kind = _KINDS.get(device.kind, -1)
            inst = 0
            profile = -1
            if kind == _KIND_MIG:
                start = int(device.attributes.get("placementStart", -1))
                inst = next(k for k, i in enumerate(gpu.partition.instances) if i.start == start)
                profile = snap.profile_id(gpu.partition.instances[inst].profile)
            elif kind == _KIND_SHARED:
                inst = int(device.attributes.get("replica", 0))
            elif kind != _KIND_GPU or gpu.partition.mode is not PartitionMode.WHOLE:
                continue
            group = groups.setdefault(values, len(groups))
            out.append((kind, slot, inst, profile, group, f"{device.driver}/{{}}/{device.name}"))
        return out

    def add(self, n: int, node: Node, rows: list[_Row]) -> None:
        base = len(self.pair_node)
        groups = 0
        for kind, slot, inst, profile, group, name in rows:
            self.node.append(n)
            self.kind.append(kind)
            self.slot.append(slot)
            self.inst.append(inst)
            self.profile.append(profile)
            self.pair.append(base + group)
            self.names.append(name.format(node.name))
            groups = max(groups, group + 1)
        self.pair_node.extend([n] * groups)
        self.node_start[n + 1] = len(self.names)

    def finish(self, snap: Snapshot) -> _ClaimIndex:
        pair_node = np.array(self.pair_node, dtype=np.int64)
        if len(pair_node):
            pair_nodes, pair_starts = np.unique(pair_node, return_index=True)
        else:
            pair_nodes, pair_starts = pair_node, pair_node
        kind = np.array(self.kind, dtype=np.int8)
        node = np.array(self.node, dtype=np.int64)
        slot = np.array(self.slot, dtype=np.int64)
        dense = None
        if (kind == _KIND_GPU).all() and len(pair_nodes) == len(pair_node):
            dense = np.zeros(snap.gpu_free.shape, dtype=bool)
            dense[node, slot] = True
        return _ClaimIndex(
            node=node,
            kind=kind,
            slot=slot,
            inst=np.array(self.inst, dtype=np.int64),
            profile=np.array(self.profile, dtype=np.int64),
            pair=np.array(self.pair, dtype=np.int64),
            pair_node=pair_node,
            names=self.names,
            node_start=self.node_start,
            pair_starts=pair_starts.astype(np.int64),
            pair_nodes=pair_nodes.astype(np.int64),
            has_mig=bool((kind == _KIND_MIG).any()),
            whole_only=bool(len(kind)) and bool((kind == _KIND_GPU).all()),
            dense=dense,
        )


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """Devices chosen for a pod's claims, as snapshot resources plus their names."""

    gpu_milli: tuple[tuple[int, int], ...] = ()
    mig: tuple[tuple[int, int], ...] = ()
    replicas: tuple[tuple[int, int], ...] = ()
    devices: tuple[str, ...] = ()
    by_claim: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def merge(self, assignment: Assignment) -> Assignment:
        """``assignment`` with these devices added."""
        return replace(
            assignment,
            gpu_milli=assignment.gpu_milli + self.gpu_milli,
            mig=assignment.mig + self.mig,
            replicas=assignment.replicas + self.replicas,
            devices=assignment.devices + self.devices,
        )


@dataclass(slots=True)
class DeviceClaims:
    """Resolves DRA-style claims against a fleet's devices (one per fleet, reused across cycles).

    ``nodes`` must be the nodes the snapshot was built from, in the same order.
    """

    nodes: Sequence[Node]
    classes: Mapping[str, DeviceClass]
    _indexes: dict[tuple[object, ...], _ClaimIndex] = field(default_factory=dict)
    _verdicts: dict[tuple[object, ...], bool] = field(default_factory=dict)
    _claim_classes: dict[tuple[str, ...], DeviceClass] = field(default_factory=dict)
    _profile_ids: dict[str, int] = field(default_factory=dict)
    #: Per claim index: (snapshot uid, node versions seen, most free devices per node).
    _best: dict[tuple[object, ...], tuple[int, np.ndarray, np.ndarray, int]] = field(
        default_factory=dict
    )
    #: Per pod object: the request its nodes are ranked by (see :meth:`scoring_request`).
    _scoring: dict[tuple[int, int], tuple[PodRequest, PodRequest]] = field(default_factory=dict)

    @classmethod
    def build(cls, nodes: Sequence[Node], classes: Iterable[DeviceClass]) -> DeviceClaims:
        return cls(nodes=nodes, classes={c.name: c for c in classes})

    # ------------------------------------------------------------------ matching (cached)
    def _class(self, claim: DeviceClaim, field_name: str) -> DeviceClass:
        device_class = self.classes.get(claim.device_class)
        if device_class is None:
            known = ", ".join(sorted(self.classes)) or "none"
            raise InvalidValue(
                f"{field_name}.device_class",
                f"unknown DeviceClass {claim.device_class!r} (known: {known})",
            )
        return device_class

    def _selectors(self, claim: DeviceClaim) -> DeviceClass | None:
        if not claim.selectors:
            return None
        selectors = self._claim_classes.get(claim.selectors)
        if selectors is None:
            selectors = DeviceClass(name=f"claim {claim.name}", selectors=claim.selectors)
            self._claim_classes[claim.selectors] = selectors
        return selectors

    def _matches(self, test: DeviceClass, reads: _SelectorReads, device: Device) -> bool:
        key = (test.name, test.selectors, test.driver, reads.key(device))
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = test.matches(device)
        return verdict

    def prepare(self, snap: Snapshot, claims: Iterable[DeviceClaim]) -> None:
        """Build the device indexes for ``claims`` now, in one pass over the fleet's devices
        (otherwise each new (class, selectors, match_attributes) is built at first use).
        Devices are published node by node and not kept: only the flat arrays stay."""
        if snap.size != len(self.nodes):
            raise InvalidValue(
                "snapshot", f"has {snap.size} nodes, the claim resolver {len(self.nodes)}"
            )
        pending: dict[tuple[object, ...], _IndexBuilder] = {}
        for i, claim in enumerate(claims):
            key = (claim.device_class, claim.selectors, claim.match_attributes)
            if key in self._indexes or key in pending:
                continue
            tests = [self._class(claim, f"claims[{i}]")]
            extra = self._selectors(claim)
            if extra is not None:
                tests.append(extra)
            pending[key] = _IndexBuilder(claim, tests, len(self.nodes))
        if not pending:
            return
        builders = list(pending.values())
        templates: dict[tuple[object, ...], list[Device]] = {}
        for n, node in enumerate(self.nodes):
            signature = _signature(node)
            own: list[Device] | None = None
            for builder in builders:
                rows = None if builder.per_node else builder.rows_of.get(signature)
                if rows is None:
                    if builder.per_node:
                        own = own if own is not None else publish_devices(node)
                        devices = own
                    else:
                        devices = templates.get(signature) or templates.setdefault(
                            signature, publish_devices(node)
                        )
                    rows = builder.rows(self, snap, node, devices)
                    if not builder.per_node:
                        builder.rows_of[signature] = rows
                builder.add(n, node, rows)
        for key, builder in pending.items():
            self._indexes[key] = builder.finish(snap)

    def _index(self, snap: Snapshot, claim: DeviceClaim, field_name: str) -> _ClaimIndex:
        key = (claim.device_class, claim.selectors, claim.match_attributes)
        index = self._indexes.get(key)
        if index is None:
            self._class(claim, field_name)  # unknown class: name the field
            self.prepare(snap, [claim])
            index = self._indexes[key]
        return index

    # ------------------------------------------------------------------ free devices
    @staticmethod
    def _free(snap: Snapshot, index: _ClaimIndex, sel: slice | np.ndarray) -> np.ndarray:
        """Free flag per device of ``index[sel]``; MIG devices by an upper bound (a free
        instance of the profile exists on the node) unless checked exactly by the caller."""
        node = index.node[sel]
        slot = index.slot[sel]
        kind = index.kind[sel]
        free = np.zeros(len(node), dtype=bool)
        gpu = kind == _KIND_GPU
        free[gpu] = snap.gpu_free[node[gpu], slot[gpu]] == MILLI
        shared = kind == _KIND_SHARED
        if shared.any():
            n, s = node[shared], slot[shared]
            used = snap.replica_total[n, s] - snap.replica_free[n, s]
            free[shared] = index.inst[sel][shared] >= used
        mig = kind == _KIND_MIG
        if mig.any():
            free[mig] = snap.mig_free[node[mig], index.profile[sel][mig]] > 0
        return free

    def feasible(self, snap: Snapshot, claims: Sequence[DeviceClaim]) -> np.ndarray:
        """Bool mask over the snapshot's nodes: each claim on its own can be met there.

        Exact for whole GPUs and replicas; an upper bound for MIG instances and for several
        claims competing for the same devices (:meth:`allocate` is exact).
        """
        mask = np.ones(snap.size, dtype=bool)
        for i, claim in enumerate(claims):
            _check_claim(claim, f"claims[{i}]")
            index = self._index(snap, claim, f"claims[{i}]")
            key = (claim.device_class, claim.selectors, claim.match_attributes)
            mask &= self._best_free(snap, key, index) >= claim.count
        return mask

    def _best_free(self, snap: Snapshot, key: tuple[object, ...], index: _ClaimIndex) -> np.ndarray:
        """Per node, the most free matching devices in one group (int64[N]), kept
        incrementally: only nodes whose snapshot version moved since the last call are
        recomputed, so a claim decision costs what changed, not the fleet's devices."""
        cached = self._best.get(key)
        if cached is None or cached[0] != snap.uid or len(cached[1]) != snap.size:
            best = self._best_of(snap, index, None)
            self._best[key] = (snap.uid, snap.version.copy(), best, snap.tick())
            return best
        uid, version, best, tick = cached
        changed, now = snap.moved_since(tick, version)  # the nodes that moved
        self._best[key] = (uid, version, best, now)
        if len(changed) > snap.size // 8:
            best[:] = self._best_of(snap, index, None)
        elif len(changed):
            best[changed] = self._best_of(snap, index, changed)
        return best

    def _best_of(self, snap: Snapshot, index: _ClaimIndex, nodes: np.ndarray | None) -> np.ndarray:
        """:meth:`_best_free` computed afresh for ``nodes`` (None: the whole fleet)."""
        if index.dense is not None:
            sel = slice(None) if nodes is None else nodes
            match = (snap.gpu_free[sel] == MILLI) & index.dense[sel]
            return np.einsum("ij->i", match.view(np.int8)).astype(np.int64)
        if nodes is None:
            best = np.zeros(snap.size, dtype=np.int64)
            if len(index.pair_node):
                free = self._free(snap, index, slice(None))
                per_pair = np.bincount(index.pair, weights=free, minlength=len(index.pair_node))
                best[index.pair_nodes] = np.maximum.reduceat(per_pair, index.pair_starts)
            return best
        starts = index.node_start[nodes]
        lengths = index.node_start[nodes + 1] - starts
        local = np.zeros(len(nodes), dtype=np.int64)
        total = int(lengths.sum())
        if total == 0:
            return local
        # the device rows of ``nodes``: [start, start + length) for each, concatenated
        offsets = np.cumsum(lengths) - lengths
        rows = np.arange(total) - np.repeat(offsets - starts, lengths)
        free = self._free(snap, index, rows)
        pairs, inverse = np.unique(index.pair[rows], return_inverse=True)
        per_pair = np.bincount(inverse, weights=free, minlength=len(pairs)).astype(np.int64)
        owner = np.repeat(np.arange(len(nodes)), lengths)  # position in ``nodes`` per row
        pair_owner = np.zeros(len(pairs), dtype=np.int64)
        pair_owner[inverse] = owner
        np.maximum.at(local, pair_owner, per_pair)
        return local

    def allocate(
        self,
        snap: Snapshot,
        node: int,
        claims: Sequence[DeviceClaim],
        base: Assignment | None = None,
    ) -> ClaimAllocation | None:
        """Exact devices for ``claims`` on ``node`` next to ``base`` (what the pod already
        takes), or None. Within a ``match_attributes`` constraint the group with the fewest free
        devices that still suffices is used (best fit), so large groups stay whole."""
        taken_gpus = {g for g, _ in base.gpu_milli} if base else set()
        taken_mig = set(base.mig) if base else set()
        replica_use: dict[int, int] = {}
        if base:
            for g, count in base.replicas:
                replica_use[g] = replica_use.get(g, 0) + count
        gpu_milli: list[tuple[int, int]] = []
        mig: list[tuple[int, int]] = []
        names: list[str] = []
        by_claim: list[tuple[str, tuple[str, ...]]] = []
        rows: tuple[list[int], list[int]] | None = None  # the node's free GPUs, used replicas
        mig_free: dict[int, set[tuple[int, int]]] = {}  # per profile, the node's free instances
        for i, claim in enumerate(claims):
            _check_claim(claim, f"claims[{i}]")
            index = self._index(snap, claim, f"claims[{i}]")
            lo, hi = int(index.node_start[node]), int(index.node_start[node + 1])
            # the node's devices as Python ints (dozens of them: numpy scalars cost more)
            slots = index.slot[lo:hi].tolist()
            kinds = index.kind[lo:hi].tolist()
            insts = index.inst[lo:hi].tolist()
            profiles = index.profile[lo:hi].tolist()
            groups: dict[int, list[int]] = {}
            if rows is None:
                rows = (
                    snap.gpu_free[node].tolist(),
                    (snap.replica_total[node] - snap.replica_free[node]).tolist(),
                )
            gpu_free, replica_used = rows
            for j, (g, kind, pair) in enumerate(
                zip(slots, kinds, index.pair[lo:hi].tolist(), strict=True)
            ):
                if kind == _KIND_GPU:
                    ok = g not in taken_gpus and gpu_free[g] == MILLI
                elif kind == _KIND_MIG:
                    inst = (g, insts[j])
                    p = profiles[j]
                    free_mig = mig_free.get(p)
                    if free_mig is None:  # a set per profile: instances are tested one by one
                        free_mig = mig_free[p] = set(snap.mig_slots.get((node, p), ()))
                    ok = inst not in taken_mig and inst in free_mig
                else:
                    used = replica_used[g] + replica_use.get(g, 0)
                    ok = insts[j] >= used
                if ok:
                    groups.setdefault(pair, []).append(lo + j)
            fitting = [ks for ks in groups.values() if len(ks) >= claim.count]
            if not fitting:
                return None
            chosen_group = min(fitting, key=lambda ks: (len(ks), ks[0]))
            if any(kinds[k - lo] == _KIND_SHARED for k in chosen_group):
                # Replicas are named in order of use: take the lowest free ones per GPU.
                chosen_group.sort(key=lambda k: (slots[k - lo], insts[k - lo]))
            chosen = chosen_group[: claim.count]
            for k in chosen:
                g = slots[k - lo]
                kind = kinds[k - lo]
                if kind == _KIND_GPU:
                    taken_gpus.add(g)
                    gpu_milli.append((g, MILLI))
                elif kind == _KIND_MIG:
                    taken_mig.add((g, insts[k - lo]))
                    mig.append((g, insts[k - lo]))
                else:
                    replica_use[g] = replica_use.get(g, 0) + 1
            claim_names = tuple(index.names[k] for k in chosen)
            names.extend(claim_names)
            by_claim.append((claim.name, claim_names))
        base_replicas = {}
        if base:
            for g, count in base.replicas:
                base_replicas[g] = base_replicas.get(g, 0) + count
        replicas = tuple(
            (g, count - base_replicas.get(g, 0))
            for g, count in sorted(replica_use.items())
            if count - base_replicas.get(g, 0) > 0
        )
        return ClaimAllocation(
            gpu_milli=tuple(gpu_milli),
            mig=tuple(mig),
            replicas=replicas,
            devices=tuple(names),
            by_claim=tuple(by_claim),
        )

    def scoring_request(self, snap: Snapshot, pod: PodRequest) -> PodRequest:
        """What the policy ranks nodes by for ``pod``: without its claims, plus as many whole
        GPUs as they take when every device they can match is a whole GPU and the pod asks for
        no GPU of its own. Otherwise a claim pod would be ranked as if it asked for no GPU (and
        a fragmentation-aware policy would send it where a CPU-only task fits best); with MIG or
        time-sliced claim devices the pod without claims is ranked, as no one GPU form stands
        for them. The devices are still chosen by :meth:`allocate`."""
        base = strip_claims(pod)
        if base.gpus or base.gpu_milli or base.mig or base.replicas:
            return base
        count = 0
        for i, claim in enumerate(pod.claims):
            if not self._index(snap, claim, f"claims[{i}]").whole_only:
                return base
            count += claim.count
        key = (id(pod), count)
        found = self._scoring.get(key)
        if found is None or found[0] is not pod:
            if len(self._scoring) >= 4096:
                self._scoring.clear()
            found = self._scoring[key] = (pod, replace(base, gpus=count))
        return found[1]

    def describe(self, claims: Sequence[DeviceClaim]) -> str:
        """The claims in words, for reasons."""
        return "; ".join(describe_claim(c) for c in claims)


def describe_claim(claim: DeviceClaim) -> str:
    text = f"claim {claim.name}: {claim.count} free device(s) of class {claim.device_class}"
    if claim.selectors:
        text += " matching " + " && ".join(claim.selectors)
    if claim.match_attributes:
        text += " sharing " + ", ".join(claim.match_attributes)
    return text


def _split(name: str, driver: str) -> tuple[str, str]:
    """``gpu.nvidia.com/nvlinkDomain`` -> (domain, name); a bare name belongs to the driver."""
    domain, _, bare = name.rpartition("/")
    return (domain or driver), bare


def _check_claim(claim: DeviceClaim, field_name: str) -> None:
    if claim.count < 1:
        raise InvalidValue(f"{field_name}.count", f"must be at least 1, got {claim.count}")


def strip_claims(pod: PodRequest) -> PodRequest:
    """The pod without its claims (what :func:`place_pod` places; claims are added after)."""
    return replace(pod, claims=()) if pod.claims else pod


def place_with_claims(
    snapshot: Snapshot,
    pod: PodRequest,
    policy: ScorePlugin,
    claims: DeviceClaims | None,
    candidates: np.ndarray | None = None,
    rng: np.random.Generator | None = None,
    feasible: np.ndarray | None = None,
    sampling: NodeSampling | None = None,
) -> Placement | Unschedulable:
    """:func:`~gpuaas.engine.place.place_pod` for a pod that may carry DRA claims.

    The claim filter narrows the candidates (vectorised), the policy chooses the node (ranking
    it by :meth:`DeviceClaims.scoring_request`), and the claims' devices are then allocated
    exactly on that node; a node
    where that fails is dropped and the pod retried (at most :data:`MAX_NODE_RETRIES` times).
    ``feasible`` is :meth:`DeviceClaims.feasible` for the pod's claims when the caller already
    has it for the current snapshot state. ``sampling`` is passed to :func:`place_pod`. Does
    not change the snapshot.
    """
    if not pod.claims:
        return place_pod(snapshot, pod, policy, candidates, rng, sampling=sampling)
    if claims is None:
        raise InvalidValue("pod.claims", "the pod has DRA claims but no DeviceClaims resolver")
    fit = feasible if feasible is not None else claims.feasible(snapshot, pod.claims)
    # A few node indices (a rack): the nodes left as indices, ascending, as a mask over the
    # fleet would give them, without the passes over every node a mask costs.
    nodes = _as_indices(snapshot, candidates)
    mask: np.ndarray = np.empty(0, dtype=bool)
    if nodes is not None:
        left: np.ndarray = nodes[fit[nodes]]
    else:
        mask = fit.copy()
        if candidates is not None:
            if candidates.dtype == bool:
                mask &= candidates
            else:
                keep = np.zeros(snapshot.size, dtype=bool)
                keep[np.asarray(candidates, dtype=np.int64)] = True
                mask &= keep
        left = mask
    considered = snapshot.size if candidates is None else int(_count(candidates))
    if not (len(left) if nodes is not None else mask.any()):
        return Unschedulable(
            f"0/{considered} nodes fit: no node has {claims.describe(pod.claims)}",
            ((Reason(Code.DEVICE_CLAIMS, {"claims": claims.describe(pod.claims)}), considered),),
            Code.DEVICE_CLAIMS,
        )
    ranked = claims.scoring_request(snapshot, pod)
    stand_in = bool(ranked.gpus) and not pod.gpus  # whole GPUs standing in for the claims
    for _ in range(MAX_NODE_RETRIES):
        placement = place_pod(snapshot, ranked, policy, left, rng, sampling=sampling)
        if isinstance(placement, Unschedulable):
            return placement
        own = placement.assignment
        if stand_in:  # the claims choose their own devices
            own = replace(own, gpu_milli=(), devices=())
        allocation = claims.allocate(snapshot, placement.node, pod.claims, own)
        if allocation is not None:
            return replace(placement, assignment=allocation.merge(own))
        if nodes is not None:
            left = left[left != placement.node]
            if not len(left):
                break
            continue
        mask[placement.node] = False
        if not mask.any():
            break
    return Unschedulable(
        f"0/{considered} nodes fit: the nodes left cannot hold {claims.describe(pod.claims)} "
        "together with the pod's other devices",
        code=Code.DEVICE_CLAIMS,
    )


def _as_indices(snapshot: Snapshot, candidates: np.ndarray | None) -> np.ndarray | None:
    """Int ``candidates`` as ascending, distinct node indices; None for a mask, for no
    candidates, or for indices outside the fleet (the mask path then treats them as before)."""
    if candidates is None or candidates.dtype == bool:
        return None
    nodes = np.unique(np.asarray(candidates, dtype=np.int64))
    if len(nodes) and (nodes[0] < 0 or nodes[-1] >= snapshot.size):
        return None
    return nodes


def _count(candidates: np.ndarray) -> int:
    return int(np.count_nonzero(candidates)) if candidates.dtype == bool else len(candidates)
