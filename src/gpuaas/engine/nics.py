"""The fleet's RDMA NICs and their free virtual functions, beside the snapshot's GPU arrays.

A pod that asks for the network (:class:`~gpuaas.model.network.NetworkRequest`) takes VFs of a
pool (``count`` per pod, or one per GPU) on the node it lands on, chosen next to its GPUs.
:class:`NicIndex` holds what that needs and the snapshot owns one (``Snapshot.nics``):

- per node slot, its NICs (static facts: pool, PCIe root, NUMA node, rail, fabric) and, for
  each, the free VF indices (lowest taken first);
- per pool, the free VFs per node as an int64 array (``pool_free``; the pool ``""`` is "any
  RDMA pool"), which the fit rule reads (:mod:`gpuaas.engine.fit`: VFs are one more rule);
- per node, its GPUs' PCIe root and NUMA node, for alignment.

Reserve, unreserve and fleet changes cost O(the node's NICs); a fleet without NICs holds only
empty dicts, and a pod that asks no NICs never reaches this module (its shape asks 0 VFs, so
the rule contributes nothing), so it costs nothing.

Alignment (the semantics, one paragraph): a VF is *aligned* with a GPU when its NIC hangs off
the same PCIe root, else (tier 1) sits on the same NUMA node; a NIC without topology is never
aligned. ``perGpu``: each of the pod's GPUs gets one VF, matched finest tier first (PCIe
roots nest inside NUMA nodes, so matching per root, then per NUMA node, then anywhere, is a
maximum matching). ``count``: the pod's VFs come from NICs aligned with any of its GPUs, best
tier first. A pod without GPUs (CPU-only) is aligned wherever it lands. ``required``: only a
choice where every VF is aligned is acceptable (nodes without one are filtered out, with
:attr:`~gpuaas.engine.reasons.Code.NIC_ALIGNMENT`); ``preferred``: nodes with a fully aligned
choice are preferred over the others, and the best choice is taken; ``none``: any free VFs.
When the policy's GPU choice cannot be aligned but another choice of whole GPUs (or another
GPU for a share) on the node can, the GPUs are chosen again, next to the NICs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuaas.model.network import Alignment, NetworkRequest, Nic, vf_name
from gpuaas.model.node import Node
from gpuaas.model.resources import GPU_MILLI, MIG_PREFIX, NVIDIA_GPU

#: The quota resource of a request that names no pool (any RDMA pool of the node): VFs of a
#: named pool are charged as that pool's extended resource, pool-less ones under this name.
ANY_POOL_RESOURCE = "gpuaas.io/rdma-vf"
#: Alignment tiers: same PCIe root, same NUMA node, not aligned.
ROOT, NUMA, UNALIGNED = 0, 1, 2


def quota_resource(network: NetworkRequest) -> str:
    """The resource the request's VFs are charged as in quota (see the module docstring)."""
    return network.pool or ANY_POOL_RESOURCE


def vfs_per_pod(network: NetworkRequest, requests: Mapping[str, int]) -> int:
    """VFs one pod with resource ``requests`` takes: ``count``, or with ``perGpu`` one per GPU
    device (whole GPUs, a share counts one, MIG instances each one)."""
    if not network.per_gpu:
        return network.count
    milli = requests.get(GPU_MILLI, 0)
    devices = requests.get(NVIDIA_GPU, 0) + (-(-milli // 1000) if milli else 0)
    devices += sum(n for r, n in requests.items() if r.startswith(MIG_PREFIX))
    return network.vfs_for(devices)


def serves(nic: Nic, pool: str) -> bool:
    """Whether ``nic`` offers VFs of ``pool`` (``""``: any RDMA NIC)."""
    return nic.pool == pool if pool else nic.rdma


def device_name(nic: Nic, vf: int) -> str:
    """The name a pod's NIC device goes by: the NIC itself when passed whole, else its VF."""
    return nic.name if nic.vfs <= 1 else vf_name(nic.name, vf)


def tier(nic: Nic, root: str, numa: int | None) -> int:
    """How well ``nic`` is aligned with a GPU on PCIe root ``root`` and NUMA node ``numa``."""
    if nic.pcie_root and nic.pcie_root == root:
        return ROOT
    if nic.numa_node is not None and numa is not None and nic.numa_node == numa:
        return NUMA
    return UNALIGNED


@dataclass(slots=True)
class NicIndex:
    """Free VFs per NIC per node and per pool; see the module docstring."""

    size: int = 0
    #: node slot -> its NICs (static; replaced, never written, so copies may share it)
    nics: dict[int, tuple[Nic, ...]] = field(default_factory=dict)
    #: node slot -> its GPUs' (pcie_root, numa_node) by GPU slot (static)
    gpus: dict[int, tuple[tuple[str, int | None], ...]] = field(default_factory=dict)
    #: node slot -> per NIC the free VF indices, highest first (``pop()`` takes the lowest)
    free: dict[int, list[list[int]]] = field(default_factory=dict)
    #: pool -> int64[N] free VFs per node (``""``: of every RDMA NIC)
    pool_free: dict[str, np.ndarray] = field(default_factory=dict)
    #: pool -> fabric -> its nodes (static; rebuilt after a fleet change)
    _fabrics: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    # ------------------------------------------------------------------ construction
    @classmethod
    def build(cls, nodes: Sequence[Node]) -> NicIndex:
        index = cls(size=len(nodes))
        for i, node in enumerate(nodes):
            if node.nics:
                index.set_node(i, node)
        return index

    def set_node(self, n: int, node: Node) -> None:
        """Give slot ``n`` (empty) the NICs of ``node``, all VFs free."""
        if not node.nics:
            return
        self._fabrics = {}
        self.nics[n] = tuple(node.nics)
        self.gpus[n] = tuple((gpu.pcie_root, gpu.numa_node) for gpu in node.gpus)
        self.free[n] = [list(range(nic.vfs - 1, -1, -1)) for nic in node.nics]
        for nic in node.nics:
            for pool in {nic.pool, ""} if nic.rdma else {nic.pool}:
                self._pool(pool)[n] += nic.vfs

    def clear_node(self, n: int) -> None:
        """Slot ``n`` holds no NICs any more (its node left or is replaced)."""
        for free in self.pool_free.values():
            free[n] = 0
        if n in self.nics:
            self._fabrics = {}
        self.nics.pop(n, None)
        self.gpus.pop(n, None)
        self.free.pop(n, None)

    def grow(self, count: int) -> None:
        """``count`` more (empty) node slots."""
        self.size += count
        for pool, free in self.pool_free.items():
            self.pool_free[pool] = np.concatenate([free, np.zeros(count, dtype=np.int64)])

    def _pool(self, pool: str) -> np.ndarray:
        free = self.pool_free.get(pool)
        if free is None:
            free = self.pool_free[pool] = np.zeros(self.size, dtype=np.int64)
        return free

    def copy(self) -> NicIndex:
        """An independent copy of the free VFs (static facts are shared)."""
        return NicIndex(
            self.size,
            dict(self.nics),
            dict(self.gpus),
            {n: [list(vfs) for vfs in row] for n, row in self.free.items()},
            {pool: free.copy() for pool, free in self.pool_free.items()},
            self._fabrics,
        )

    # ------------------------------------------------------------------ queries
    def free_of(self, pool: str) -> np.ndarray | None:
        """Free VFs of ``pool`` per node, or None when no node has the pool."""
        return self.pool_free.get(pool)

    def holds_reservation(self, n: int) -> bool:
        nics = self.nics.get(n)
        return nics is not None and any(
            len(vfs) != nic.vfs for nic, vfs in zip(nics, self.free[n], strict=True)
        )

    def devices(self, n: int, taken: Sequence[tuple[int, int]]) -> tuple[str, ...]:
        """The names of ``taken`` (NIC slot, VF) on node ``n``."""
        nics = self.nics[n]
        return tuple(device_name(nics[j], vf) for j, vf in taken)

    # ------------------------------------------------------------------ reserve / unreserve
    def check(self, n: int, taken: Sequence[tuple[int, int]]) -> str | None:
        """Why ``taken`` cannot be reserved on node ``n`` (None: it can)."""
        rows = self.free.get(n)
        if rows is None:
            return "has no NICs"
        seen: set[tuple[int, int]] = set()
        for j, vf in taken:
            if not 0 <= j < len(rows) or vf not in rows[j] or (j, vf) in seen:
                return f"NIC {j} VF {vf} is not free"
            seen.add((j, vf))
        return None

    def apply(self, n: int, taken: Sequence[tuple[int, int]], sign: int) -> None:
        """Take (``sign`` -1) or give back (+1) ``taken`` on node ``n``."""
        rows = self.free[n]
        nics = self.nics[n]
        for j, vf in taken:
            if sign < 0:
                rows[j].remove(vf)
            else:
                rows[j].append(vf)
                rows[j].sort(reverse=True)
            nic = nics[j]
            self.pool_free[nic.pool][n] += sign
            if nic.rdma:
                self.pool_free[""][n] += sign

    # ------------------------------------------------------------------ choosing VFs
    def choose(
        self, n: int, gpus: Sequence[int], network: NetworkRequest, per_pod: int
    ) -> tuple[tuple[tuple[int, int], ...], int] | None:
        """VFs for one pod on node ``n`` given its GPU slots ``gpus``: ``(taken, unaligned)``
        where ``taken`` lists (NIC slot, VF) and ``unaligned`` how many of them are not
        aligned (see the module docstring); None when there are too few free VFs, or too few
        aligned ones under ``required``."""
        rows = self.free.get(n)
        if rows is None:
            return None if per_pod else ((), 0)
        nics = self.nics[n]
        pool = network.pool
        left = [len(vfs) if serves(nic, pool) else 0 for nic, vfs in zip(nics, rows, strict=True)]
        if sum(left) < per_pod:
            return None
        required = network.alignment is Alignment.REQUIRED
        ignore = network.alignment is Alignment.NONE
        topo = self.gpus[n]
        places = [topo[g] if g < len(topo) else ("", None) for g in gpus]
        picks: list[tuple[int, int]] = []  # (NIC slot, tier)
        if network.per_gpu and places:
            # finest tier first over every GPU: a maximum matching on nested domains (two MIG
            # instances or replicas on one GPU want two VFs beside that GPU)
            wanting = [k % len(places) for k in range(per_pod)]
            for level in (UNALIGNED,) if ignore else (ROOT, NUMA, UNALIGNED):
                if level == UNALIGNED and required:
                    break
                still: list[int] = []
                for k in wanting:
                    root, numa = places[k]
                    j = _best(nics, left, lambda nic, r=root, u=numa: tier(nic, r, u), level)
                    if j is None:
                        still.append(k)
                        continue
                    left[j] -= 1
                    picks.append((j, level))
                wanting = still
            if wanting:
                return None
        else:
            for _ in range(per_pod):
                if ignore or not places:
                    j = _best(nics, left, lambda nic: ROOT, UNALIGNED)
                    level = ROOT
                else:
                    j = level = None
                    for want in (ROOT, NUMA, UNALIGNED):
                        if want == UNALIGNED and required:
                            break
                        j = _best(nics, left, lambda nic: _tier_any(nic, places), want)
                        if j is not None:
                            level = want
                            break
                if j is None or level is None:
                    return None
                left[j] -= 1
                picks.append((j, level))
        used: dict[int, int] = {}
        taken: list[tuple[int, int]] = []
        for j, _ in sorted(picks):
            k = used.get(j, 0)
            used[j] = k + 1
            taken.append((j, rows[j][-1 - k]))
        unaligned = sum(1 for _, level in picks if level == UNALIGNED) if not ignore else 0
        return tuple(taken), unaligned

    def node_fabric(self, n: int, pool: str) -> str:
        """The fabric (else the first rail) of node ``n``'s NICs of ``pool``; ``""`` unknown."""
        for nic in self.nics.get(n, ()):
            if serves(nic, pool) and (nic.fabric or nic.rail):
                return nic.fabric or nic.rail
        return ""

    def fabrics(self, pool: str) -> dict[str, np.ndarray]:
        """Per fabric (see :meth:`node_fabric`; unknown ones left out) the nodes offering
        ``pool`` on it, ascending; cached until the fleet changes."""
        found = self._fabrics.get(pool)
        if found is None:
            members: dict[str, list[int]] = {}
            for n in sorted(self.nics):
                fabric = self.node_fabric(n, pool)
                if fabric:
                    members.setdefault(fabric, []).append(n)
            found = {f: np.array(ns, dtype=np.int64) for f, ns in members.items()}
            self._fabrics = {**self._fabrics, pool: found}
        return found

    def has_topology(self, pool: str) -> bool:
        """Whether any node offering ``pool`` knows where its NICs sit."""
        return any(
            nic.has_topology for nics in self.nics.values() for nic in nics if serves(nic, pool)
        )

    def canonical(self, names: Sequence[str]) -> dict[str, object]:
        """Per node name, its NICs' free VFs (for the snapshot's equality checks in tests)."""
        return {
            names[n]: tuple(
                (nic.name, tuple(sorted(vfs))) for nic, vfs in zip(nics, self.free[n], strict=True)
            )
            for n, nics in self.nics.items()
        }

    def check_indexes(self) -> None:
        """AssertionError when ``pool_free`` differs from a recount of the free VFs."""
        expect: dict[str, np.ndarray] = {p: np.zeros(self.size, np.int64) for p in self.pool_free}
        for n, nics in self.nics.items():
            for nic, vfs in zip(nics, self.free[n], strict=True):
                expect[nic.pool][n] += len(vfs)
                if nic.rdma:
                    expect[""][n] += len(vfs)
        for pool, free in self.pool_free.items():
            assert len(free) == self.size
            assert np.array_equal(free, expect[pool]), pool


def _tier_any(nic: Nic, places: Sequence[tuple[str, int | None]]) -> int:
    return min(tier(nic, root, numa) for root, numa in places)


def _best(nics: Sequence[Nic], left: list[int], rank: object, level: int) -> int | None:
    """The first NIC slot with a free VF whose tier (``rank(nic)``) is ``level`` (at most
    ``level`` for UNALIGNED: anything goes), preferring the NIC with the most free VFs left
    (spreading a pod's VFs evenly over its rails), then the lowest slot."""
    best: int | None = None
    for j, nic in enumerate(nics):
        if left[j] <= 0:
            continue
        t = rank(nic)  # type: ignore[operator]
        if t != level and level != UNALIGNED:
            continue
        if best is None or left[j] > left[best]:
            best = j
    return best
