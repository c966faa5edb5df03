"""What a job may ask for: resources the platform knows, in amounts it could ever give.

A job that asks for something no node has or no grant covers would wait forever with a pending
reason; these checks refuse it at submission instead (422, naming the field and both numbers).
They are bounds on what could *ever* be satisfied, never on what is free now: a job that only
has to wait for others to finish is accepted.

- **Names.** Every resource a pod asks for (written, or filled in by a hardware profile) must be
  one the platform knows: ``cpu``, ``memory`` and ``ephemeral-storage``, what any registered
  node advertises (``nvidia.com/gpu``, MIG resources such as ``nvidia.com/mig-1g.10gb``,
  renamed shares, other extended resources), or what any ClusterQueue or Cohort covers
  (``gpuaas.io/gpu-milli``, a resource of nodes yet to come). Anything else, a typo such as
  ``nvidia.com/gpus`` or another vendor's ``amd.com/gpu``, is refused with the known names and
  the closest ones.
- **Per pod.** A pod runs on one node, so it cannot ask for more of a resource than the largest
  node of a flavor its ClusterQueue could give it for that resource (nodes matching the
  flavor's ``nodeLabels``; cordoned ones count, they come back). For ``gpuaas.io/gpu-milli`` a
  node holds 1000 per GPU. A fleet without nodes bounds nothing (a service being set up queues
  jobs until nodes are registered).
- **In all.** What a pod set is charged in quota (as the admission engine charges it, MIG slices
  and shares by their size where the ClusterQueue covers ``gpuaas.io/gpu-milli``) cannot exceed
  what its ClusterQueue could ever hold of the best flavor: its nominal quota plus what it may
  borrow, within its borrowing limit and its cohort tree's total (the engine's
  ``potential_available``); the whole job cannot exceed that summed over the flavors. A
  resource the ClusterQueue does not cover at all is refused too: Kueue never admits it.
- **Networks.** A pod set's ``network.pool`` must be a NIC pool some registered node offers
  (an empty pool: any RDMA NIC, so some node must have one), no pod may ask more VFs than the
  largest node offers of it, and ``alignment: required`` needs some node offering the pool to
  know where its NICs sit (PCIe root or NUMA node): otherwise no placement could ever be
  aligned. Nodes without NIC topology are accepted at registration (alignment ``preferred``
  and ``none`` use them). Like the other node bounds, these apply once nodes are registered.

Both bounds come from cached state: a :class:`SubmissionBounds` is built when
``governance.version`` or ``fleet.version`` moves (at once for writes in this process, within
:data:`FLEET_RECHECK` seconds for other replicas'), so a submission pays a few dictionary
lookups. The engine's own node taints and topology are not considered: these are upper bounds.
"""

from __future__ import annotations

import difflib
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.engine.admission.cycle import AdmissionEngine
from gpuaas.engine.admission.gpu_size import is_gpu_device
from gpuaas.engine.nics import quota_resource, vfs_per_pod
from gpuaas.engine.snapshot import node_labels
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import AdmissionPodSet, Governance
from gpuaas.model.network import Alignment, NetworkRequest
from gpuaas.model.node import Node
from gpuaas.model.resources import (
    CPU,
    EPHEMERAL_STORAGE,
    GPU_MILLI,
    MEMORY,
    ResourceList,
    describe_amount,
)
from gpuaas.service.fleet import FLEET_VERSION, VERSION_LISTENERS, load_nodes
from gpuaas.service.governance import GOVERNANCE_VERSION
from gpuaas.store.db import where as db_where
from gpuaas.store.tables import Meta
from gpuaas.supply.partition import advertised_resources

#: Resources every Kubernetes node has, known whether or not a node is registered.
BASE_RESOURCES = (CPU, MEMORY, EPHEMERAL_STORAGE)
#: How long submissions trust the fleet version they read before reading it again.
FLEET_RECHECK = 1.0

_FLEET_VERSION = select(Meta.value).where(Meta.key == FLEET_VERSION)


class SubmissionBounds:
    """Known resource names and the largest amounts a job could be given, for one governance
    and one fleet. Per ClusterQueue answers are computed on first use and kept."""

    def __init__(
        self, gov: Governance, nodes: Sequence[Node], growing: frozenset[str] = frozenset()
    ) -> None:
        self.gov = gov
        #: flavors whose nodes grow from the whole fleet (the idle pool's: its largest node is
        #: the fleet's, whatever it holds now; docs/idle-pool.md)
        self.growing = growing
        self.engine = AdmissionEngine(gov)  # its quota_requests and tree, never run
        self.nodes: list[tuple[dict[str, str], ResourceList]] = []
        for node in nodes:
            resources = advertised_resources(node)
            if node.gpus:
                resources[GPU_MILLI] = 1000 * len(node.gpus)
            self.nodes.append((node_labels(node), resources))
        known = set(BASE_RESOURCES)
        for _, resources in self.nodes:
            known.update(resources)
        owners = [*gov.cluster_queues.values(), *gov.cohorts.values()]
        for owner in owners:
            for group in owner.resource_groups:
                known.update(group.covered_resources)
        self.known = frozenset(known)
        #: NIC pool ("" = any RDMA NIC) -> (most VFs one node has, whether any node knows
        #: where those NICs sit)
        self.nic_pools: dict[str, tuple[int, bool]] = {}
        for node in nodes:
            per_pool: dict[str, tuple[int, bool]] = {}
            for nic in node.nics:
                for pool in (nic.pool, "") if nic.rdma else (nic.pool,):
                    vfs, topo = per_pool.get(pool, (0, False))
                    per_pool[pool] = (vfs + nic.vfs, topo or nic.has_topology)
            for pool, (vfs, topo) in per_pool.items():
                most, known_topo = self.nic_pools.get(pool, (0, False))
                self.nic_pools[pool] = (max(most, vfs), known_topo or topo)
        self._groups: dict[str, dict[str, tuple[str, ...]]] = {}
        self._largest: dict[tuple[str, str], tuple[int, tuple[str, ...]]] = {}
        self._capacity: dict[tuple[str, str], tuple[int, int]] = {}

    # --- names ----------------------------------------------------------------------------

    def check_names(self, requests: Mapping[str, int], where: str) -> None:
        for name in requests:
            if name not in self.known:
                close = difflib.get_close_matches(name, self.known, n=3, cutoff=0.75)
                hint = f" (did you mean {' or '.join(close)}?)" if close else ""
                raise InvalidValue(
                    f"{where}.{name}",
                    f"unknown resource {name!r}{hint}: no node has it and no ClusterQueue "
                    f"covers it (known: {', '.join(sorted(self.known))})",
                )

    # --- per ClusterQueue -----------------------------------------------------------------

    def flavors_for(self, cq: str, resource: str) -> tuple[str, ...] | None:
        """The flavors ``cq`` could give ``resource`` on (those of the group covering it, or of
        ``gpuaas.io/gpu-milli`` for a GPU device charged by size); None when it covers neither."""
        groups = self._groups.get(cq)
        if groups is None:
            groups = {}
            for group in self.gov.cluster_queues[cq].resource_groups:
                names = tuple(f.name for f in group.flavors)
                for covered in group.covered_resources:
                    groups[covered] = names
            self._groups[cq] = groups
        found = groups.get(resource)
        if found is None and is_gpu_device(resource):
            found = groups.get(GPU_MILLI)
        return found

    def largest_node(self, cq: str, resource: str) -> tuple[int, tuple[str, ...]]:
        """The most of ``resource`` one node of ``cq``'s flavors for it has, and those flavors."""
        key = (cq, resource)
        found = self._largest.get(key)
        if found is None:
            flavors = self.flavors_for(cq, resource) or ()
            largest = 0
            for name in flavors:
                wanted = self.gov.flavors[name].node_labels.items()
                if name in self.growing:
                    wanted = {}.items()
                for labels, resources in self.nodes:
                    if all(labels.get(k) == v for k, v in wanted):
                        largest = max(largest, resources.get(resource, 0))
            found = (largest, flavors)
            self._largest[key] = found
        return found

    def capacity(self, cq: str, resource: str) -> tuple[int, int]:
        """(the most ``cq`` could ever hold of ``resource`` on one flavor, on all together)."""
        key = (cq, resource)
        found = self._capacity.get(key)
        if found is None:
            tree = self.engine.tree
            node = tree.cqs[cq]
            each = [
                tree.potential_available(node, (flavor, resource))
                for flavor in self.flavors_for(cq, resource) or ()
            ]
            found = (max(each, default=0), sum(each))
            self._capacity[key] = found
        return found

    # --- the check ------------------------------------------------------------------------

    def check(self, queue_key: str, pod_sets: Sequence[Mapping[str, Any]]) -> None:
        """Refuse the resolved pod sets (``{name, count, requests}``) of a job for LocalQueue
        ``queue_key`` ("tenant/name") if they ask for an unknown resource or for more than
        any node or the ClusterQueue could ever give; InvalidValue names the field."""
        for i, ps in enumerate(pod_sets):
            self.check_names(ps["requests"], f"podSets[{i}].resources")
            if ps.get("network") and self.nodes:
                self._check_network(ps, f"podSets[{i}].network")
        cq = self.gov.local_queues[queue_key].cluster_queue
        if self.nodes:
            for i, ps in enumerate(pod_sets):
                self._check_per_pod(cq, ps["requests"], f"podSets[{i}].resources")
        totals: dict[str, int] = {}
        fields: dict[str, str] = {}
        for i, ps in enumerate(pod_sets):
            requests, count = ps["requests"], ps["count"]
            network = network_request(ps.get("network"))
            charged = self.engine.quota_requests(
                AdmissionPodSet(ps["name"], count, requests, network=network), cq
            )
            for resource, amount in charged.items():
                field = _field_of(resource, requests, f"podSets[{i}].resources")
                if network is not None and resource == quota_resource(network):
                    field = f"podSets[{i}].network"
                fields.setdefault(resource, field)
                totals[resource] = totals.get(resource, 0) + amount
                if self.flavors_for(cq, resource) is None:
                    covered = sorted(
                        r for g in self.gov.cluster_queues[cq].resource_groups
                        for r in g.covered_resources
                    )  # fmt: skip
                    raise InvalidValue(
                        field,
                        f"ClusterQueue {cq} (of LocalQueue {queue_key.split('/', 1)[1]}) has "
                        f"no quota for {resource}, so no job asking for it is ever admitted "
                        f"there (it covers: {', '.join(covered) or 'nothing'})",
                    )
                most, _ = self.capacity(cq, resource)
                if amount > most:
                    pods = f"{count} pods" if count != 1 else "1 pod"
                    raise InvalidValue(
                        field,
                        f"asks for {describe_amount(resource, amount)} in all ({pods}); "
                        f"ClusterQueue {cq} could hold at most {describe_amount(resource, most)} "
                        "(its nominal quota plus what it may borrow)",
                    )
        if len(pod_sets) > 1:
            for resource, amount in totals.items():
                _, every = self.capacity(cq, resource)
                if amount > every:
                    raise InvalidValue(
                        "podSets",
                        f"asks for {describe_amount(resource, amount)} in all; ClusterQueue "
                        f"{cq} could hold at most {describe_amount(resource, every)} of "
                        f"{resource} (its nominal quota plus what it may borrow)",
                    )

    def _check_network(self, ps: Mapping[str, Any], where: str) -> None:
        network = network_request(ps["network"])
        assert network is not None
        found = self.nic_pools.get(network.pool)
        if found is None:
            pools = sorted(p for p in self.nic_pools if p)
            what = f"NIC pool {network.pool!r}" if network.pool else "an RDMA NIC"
            raise InvalidValue(
                f"{where}.pool",
                f"no registered node offers {what} (pools: {', '.join(pools) or 'none'})",
            )
        most, topology = found
        vfs = vfs_per_pod(network, ps["requests"])
        if vfs > most:
            field = f"{where}.perGpu" if network.per_gpu else f"{where}.count"
            raise InvalidValue(
                field, f"asks for {vfs} NIC VFs per pod; the largest node offers {most}"
            )
        if network.alignment is Alignment.REQUIRED and not topology:
            raise InvalidValue(
                f"{where}.alignment",
                "required alignment needs NIC topology (PCIe root or NUMA node), and no node "
                f"offering {network.pool or 'an RDMA NIC'} has it; use preferred or none",
            )

    def _check_per_pod(self, cq: str, requests: Mapping[str, int], where: str) -> None:
        for resource, amount in requests.items():
            if amount <= 0 or self.flavors_for(cq, resource) is None:
                continue  # not covered: the quota check says so
            largest, flavors = self.largest_node(cq, resource)
            if amount > largest:
                of = ("flavor " if len(flavors) == 1 else "flavors ") + ", ".join(flavors)
                has = describe_amount(resource, largest) if largest else "none"
                raise InvalidValue(
                    f"{where}.{resource}",
                    f"asks for {describe_amount(resource, amount)} per pod; the largest node "
                    f"of {of} has {has}",
                )


def network_request(spec: Mapping[str, Any] | None) -> NetworkRequest | None:
    """A resolved pod set's ``network`` (the API's NetworkSpec, as stored) as the engine's
    request."""
    if not spec:
        return None
    return NetworkRequest(
        pool=str(spec.get("pool", "")),
        count=int(spec.get("count", 0)),
        per_gpu=bool(spec.get("perGpu", False)),
        alignment=Alignment(spec.get("alignment", "preferred")),
    )


def _field_of(charged: str, requests: Mapping[str, int], where: str) -> str:
    """The request field a quota charge comes from (a GPU device for a milli-GPU charge)."""
    if charged in requests:
        return f"{where}.{charged}"
    if charged == GPU_MILLI:
        for name, amount in requests.items():
            if amount and is_gpu_device(name):
                return f"{where}.{name}"
    return where


# --- the cache --------------------------------------------------------------------------------

_lock = threading.Lock()
#: by database: (governance version, fleet version, when the fleet version was read, bounds)
_bounds: dict[str, tuple[str, str, float, SubmissionBounds]] = {}


def submission_bounds(session: Session, gov_version: str, gov: Governance) -> SubmissionBounds:
    """The bounds for ``gov`` and the current fleet, rebuilt only when either version moved."""
    where = db_where(session)
    found = _bounds.get(where)
    clock = time.monotonic()
    if found is not None and found[0] == gov_version and clock - found[2] < FLEET_RECHECK:
        return found[3]
    fleet_version = session.scalar(_FLEET_VERSION) or "0"
    if found is not None and found[0] == gov_version and found[1] == fleet_version:
        bounds = found[3]
    else:
        from gpuaas.service.idle_pool import pool_flavors

        bounds = SubmissionBounds(gov, load_nodes(session), pool_flavors(session))
    with _lock:
        _bounds[where] = (gov_version, fleet_version, clock, bounds)
    return bounds


def check_requests(
    session: Session,
    gov_version: str,
    gov: Governance,
    queue_key: str,
    pod_sets: Sequence[Mapping[str, Any]],
) -> None:
    """Refuse a job whose resolved pod sets no node or grant could ever satisfy (see above)."""
    submission_bounds(session, gov_version, gov).check(queue_key, pod_sets)


def forget_bounds(key: str) -> None:
    if key in (FLEET_VERSION, GOVERNANCE_VERSION):
        with _lock:
            _bounds.clear()


VERSION_LISTENERS.append(forget_bounds)
