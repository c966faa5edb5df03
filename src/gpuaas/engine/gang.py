"""Gang placement: every pod of every pod set of a workload gets devices, or none does.

:func:`place_workload` reserves pod by pod (so each pod sees what the previous ones took) inside
the scopes :mod:`gpuaas.engine.topology` offers, and on any failure unreserves, in reverse order,
everything it reserved: the snapshot is then bit for bit what it was before the attempt.

Order and pruning, so that a cloud-sized fleet is cheap:

1. quick rejection before touching any node: the workload's whole GPUs against the free whole
   GPUs of the models it may use (the snapshot's per-model index), its GPU shares against the free
   milli-GPU, its MIG instances and replicas against the fleet's free ones;
2. pod sets largest first (by GPUs, then pods), so the hard part fails first and cheaply;
3. per pod set, the scopes in topology order; within a scope, the pods one by one through the
   ordinary :func:`~gpuaas.engine.place.place_pod` restricted to the scope's nodes, so the
   policy (packing, FGD, ...) still chooses nodes and devices (the scope's feasible nodes are
   filtered once per pod set, then only the node each pod went to is checked again); or, where
   the policy's choice is sticky for identical pods (best fit, packing, clustering), the
   scope's feasible nodes ranked once and filled in that order (:mod:`gpuaas.engine.bulk`),
   with the same decisions.

Every failure carries a reason a user can act on, e.g. ``gang train-7: pod set workers needs 16
pods of 8 GPUs in one rack; best rack rack-0012 fits 13``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from gpuaas.engine.bulk import bulk_fill
from gpuaas.engine.claims import DeviceClaims, place_with_claims
from gpuaas.engine.fit import fits_one
from gpuaas.engine.framework import (
    CycleState,
    PodShape,
    ReservePlugin,
    ScorePlugin,
    feasible_nodes,
    reserve_hooks,
)
from gpuaas.engine.place import (
    NodeSampling,
    Placement,
    Unschedulable,
    choose_node,
    place_nodes,
    validate_pod,
)
from gpuaas.engine.reasons import Code
from gpuaas.engine.snapshot import Assignment, Snapshot
from gpuaas.engine.topology import ScopePlan, iter_pack_scopes, plan_scopes, pods_per_node
from gpuaas.engine.topology import model_ids as known_model_ids
from gpuaas.model.errors import InvalidValue
from gpuaas.model.topology import Level
from gpuaas.model.workload import PodRequest, PodSet, Workload


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """One pod of a gang: its pod set, its number within the set, and where it goes."""

    pod_set: str
    index: int
    pod: PodRequest
    placement: Placement

    @property
    def assignment(self) -> Assignment:
        return self.placement.assignment


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """A workload placed whole; ``scopes`` says where each pod set went (``rack rack-0003``)."""

    workload: str
    pods: tuple[PodPlacement, ...]
    scopes: tuple[tuple[str, str], ...] = ()

    @property
    def nodes(self) -> list[int]:
        return [p.placement.node for p in self.pods]

    def __iter__(self) -> Iterator[PodPlacement]:
        return iter(self.pods)

    def __len__(self) -> int:
        return len(self.pods)


def _validate(workload: Workload) -> None:
    if not workload.pod_sets:
        raise InvalidValue(f"workload {workload.name}", "has no pod sets")
    names: set[str] = set()
    for i, pod_set in enumerate(workload.pod_sets):
        if pod_set.count < 1:
            where = f"workload {workload.name}: pod_sets[{i}] ({pod_set.name})"
            raise InvalidValue(f"{where}.count", f"must be at least 1, got {pod_set.count}")
        if pod_set.name in names:
            where = f"workload {workload.name}: pod_sets[{i}] ({pod_set.name})"
            raise InvalidValue(f"{where}.name", f"pod set name {pod_set.name!r} is repeated")
        names.add(pod_set.name)


def _label(workload: Workload) -> str:
    """How reasons name the workload (built only when there is a reason to give)."""
    return f"gang {workload.name}" if workload.pod_count > 1 else f"workload {workload.name}"


def _size(pod_set: PodSet) -> tuple[int, int]:
    shape = PodShape.of(pod_set.pod)
    claimed = sum(c.count for c in pod_set.pod.claims) * 1000
    return (pod_set.count * (shape.milli + claimed), pod_set.count)


def _total(per_model: np.ndarray, ids: list[int] | slice) -> int:
    """The sum of ``per_model`` (int64, one per GPU model) over ``ids``, exactly."""
    values = per_model.tolist()
    return sum(values) if isinstance(ids, slice) else sum(values[i] for i in ids)


def _quick_reject(snap: Snapshot, workload: Workload) -> tuple[Code, str] | None:
    """The code and words when the fleet obviously lacks the workload's devices
    (O(models + profiles)); None when it may not."""
    whole_by_models: dict[frozenset[str], int] = {}
    share_by_models: dict[frozenset[str], int] = {}
    mig: dict[str, int] = {}
    replicas = 0
    for pod_set in workload.pod_sets:
        shape = PodShape.of(pod_set.pod)
        if shape.whole:
            whole_by_models[shape.models] = (
                whole_by_models.get(shape.models, 0) + pod_set.count * shape.whole
            )
        if shape.share:
            share_by_models[shape.models] = (
                share_by_models.get(shape.models, 0) + pod_set.count * shape.share
            )
        for profile, count in shape.mig:
            mig[profile] = mig.get(profile, 0) + count * pod_set.count
        replicas += shape.replicas * pod_set.count

    def model_ids(models: frozenset[str]) -> list[int] | slice:
        return known_model_ids(snap, models) if models else slice(None)

    # the per-model sums in Python ints: a few models, where numpy's sum costs microseconds
    for models, need in whole_by_models.items():
        free = _total(snap.model_free_gpus, model_ids(models))
        if free < need:
            which = "" if not models else " of " + "/".join(sorted(models))
            return (
                Code.INSUFFICIENT_GPU,
                f"needs {need} free whole GPUs{which}; the fleet has {free}",
            )
    for models, need in share_by_models.items():
        free = _total(snap.model_free_milli, model_ids(models))
        if free < need:
            return (
                Code.INSUFFICIENT_GPU,
                f"needs {need / 1000:g} GPUs of shares; the fleet has {free / 1000:g} free",
            )
    for profile, need in mig.items():
        p = snap.profile_id(profile)
        free = int(snap.mig_total[p]) if p >= 0 else 0
        if free < need:
            return (
                Code.INSUFFICIENT_MIG,
                f"needs {need} free MIG {profile} instances; the fleet has {free}",
            )
    if replicas:
        free = int(snap.replica_sum.sum())
        if free < replicas:
            return (
                Code.INSUFFICIENT_REPLICAS,
                f"needs {replicas} free time-sliced replicas; the fleet has {free}",
            )
    return None


def _place_in_scope(
    snap: Snapshot,
    pod_set: PodSet,
    nodes: np.ndarray | None,
    policy: ScorePlugin,
    hooks: ReservePlugin | None,
    claims: DeviceClaims | None,
    rng: np.random.Generator | None,
    placed: list[PodPlacement],
    feasible: np.ndarray | None = None,
    sampling: NodeSampling | None = None,
    explain: bool = True,
    within: np.ndarray | None = None,
) -> Unschedulable | None:
    """Reserve ``pod_set.count`` pods within ``nodes``; on failure unreserve this set's pods.
    ``feasible``: the claim filter, when already computed for the first pod. ``nodes`` come
    from the topology module (domain members), so they are not re-validated per pod.
    ``explain=False`` when the caller discards the reason of a failure (a pack scope).
    ``within``: bool mask over the fleet; only its nodes are tried."""
    if within is not None:
        nodes = np.flatnonzero(within) if nodes is None else nodes[within[nodes]]
    start = len(placed)
    pod = pod_set.pod
    shape = PodShape.of(pod)
    # identical pods under a policy whose choice is sticky: filled in bulk, same decisions
    first = (
        0 if sampling is not None else bulk_fill(snap, pod_set, nodes, policy, hooks, rng, placed)
    )
    # Several pods without claims or NICs keep the set's feasible nodes across its pods: a
    # pod's reservation changes only its own node (the fit rule reads each node's own free
    # resources; the static filters never move with reservations), so only that node is
    # checked again (:func:`~gpuaas.engine.fit.fits_one`), not every node of the scope per pod.
    kept: np.ndarray | None = None
    total = snap.size if nodes is None else len(nodes)
    one_by_one = shape.nics or pod_set.count - first < 2
    for i in range(first, pod_set.count):
        if pod.claims:
            result = place_with_claims(
                snap, pod, policy, claims, nodes, rng, feasible if i == 0 else None, sampling
            )
        else:
            state = CycleState(pod=pod, shape=shape, rng=rng)
            if one_by_one:
                result = place_nodes(snap, state, policy, nodes, sampling=sampling, explain=explain)
            else:
                if kept is None:
                    kept = feasible_nodes(state, snap, nodes)
                if len(kept):
                    result = choose_node(snap, state, policy, kept, total, sampling)
                else:  # nothing fits: the one-pod path's answer, its reason word for word
                    result = place_nodes(
                        snap, state, policy, nodes, sampling=sampling, explain=explain
                    )
        if isinstance(result, Unschedulable):
            _rollback(snap, placed, start, hooks)
            return result
        snap.reserve(result.node, result.assignment)
        if hooks is not None:
            hooks.on_reserve(snap, pod, result.assignment)
        placed.append(PodPlacement(pod_set.name, i, pod, result))
        if kept is not None and i + 1 < pod_set.count and not fits_one(snap, shape, result.node):
            kept = kept[kept != result.node]
    return None


def _rollback(
    snap: Snapshot, placed: list[PodPlacement], start: int, hooks: ReservePlugin | None
) -> None:
    while len(placed) > start:
        done = placed.pop()
        snap.unreserve(done.assignment)
        if hooks is not None:
            hooks.on_unreserve(snap, done.pod, done.assignment)


def place_workload(
    snapshot: Snapshot,
    workload: Workload,
    policy: ScorePlugin,
    *,
    claims: DeviceClaims | None = None,
    rng: np.random.Generator | None = None,
    max_domains: int = 3,
    pack_level: Level | None = Level.RACK,
    sampling: NodeSampling | None = None,
    within: np.ndarray | None = None,
) -> GangPlacement | Unschedulable:
    """Place and reserve all pods of ``workload``, or nothing.

    On success the snapshot holds every pod's reservation (give them back with :func:`release`).
    On failure it is exactly as before and the :class:`Unschedulable` says why. ``claims``
    resolves DRA device claims (needed only when a pod has some). ``max_domains`` caps the
    domains tried per pod set with a required topology. ``pack_level``: a single pod without a
    topology request first goes to the best-fit domains of this level (see
    :func:`~gpuaas.engine.topology.pack_scopes`) and the policy chooses the node inside; only if
    none works does the policy see the whole fleet; None lets the policy see the whole fleet
    at once (slower on large fleets, and large domains are not kept whole). ``sampling``: score
    only a bounded number of feasible nodes per pod (kube-scheduler's
    ``percentageOfNodesToScore``, see :class:`~gpuaas.engine.place.NodeSampling`); it only
    bites where a scope is larger than its minimum (100 nodes), i.e. whole-fleet scopes and
    multi-domain ones, never inside one rack. ``within``: a bool mask over the fleet; only
    its nodes are used (data locality's warm nodes, :mod:`gpuaas.engine.locality`). Raises
    InvalidValue for a malformed workload (no pod sets, a count below 1, repeated pod set names).
    """
    _validate(workload)
    lacking = _quick_reject(snapshot, workload)
    if lacking is not None:
        return Unschedulable(f"{_label(workload)}: {lacking[1]}", code=lacking[0])
    hooks = reserve_hooks(policy)
    for pod_set in workload.pod_sets:
        validate_pod(pod_set.pod, allow_claims=True)
    pod_sets = workload.pod_sets
    ordered = sorted(pod_sets, key=_size, reverse=True) if len(pod_sets) > 1 else pod_sets
    placed: list[PodPlacement] = []
    scopes: list[tuple[str, str]] = []
    fabrics: list[str] = []  # the fabrics this gang's pod sets went to, preferred for the next
    for pod_set in ordered:
        pod = pod_set.pod
        if pod.network is not None and workload.pod_count > 1 and pod_set.topology is None:
            fabric = _place_on_one_fabric(
                snapshot, pod_set, policy, hooks, rng, placed, fabrics, sampling
            )
            if fabric is not None:
                scopes.append((pod_set.name, f"fabric {fabric}"))
                continue
        if pod_set.count == 1 and pod_set.topology is None:
            failure: Unschedulable | None = None
            scope_name = "anywhere"
            packed = False
            feasible = claims.feasible(snapshot, pod.claims) if pod.claims and claims else None
            if within is not None:
                feasible = within if feasible is None else feasible & within
            if pack_level is not None:
                for scope in iter_pack_scopes(snapshot, pod, pack_level, extra=feasible):
                    tried = _place_in_scope(
                        snapshot,
                        pod_set,
                        scope.nodes,
                        policy,
                        hooks,
                        claims,
                        rng,
                        placed,
                        feasible,
                        sampling,
                        explain=False,
                        within=within,
                    )
                    if tried is None:
                        scope_name = scope.description
                        packed = True
                        break
            if not packed:
                failure = _place_in_scope(
                    snapshot,
                    pod_set,
                    None,
                    policy,
                    hooks,
                    claims,
                    rng,
                    placed,
                    feasible,
                    sampling,
                    within=within,
                )
            if failure is not None:
                _rollback(snapshot, placed, 0, hooks)
                return Unschedulable(
                    f"{_label(workload)}: pod set {pod_set.name}: {failure.reason}",
                    failure.rejected,
                    failure.code,
                )
            scopes.append((pod_set.name, scope_name))
            continue
        extra = claims.feasible(snapshot, pod.claims) if pod.claims and claims else None
        if within is not None:
            extra = within if extra is None else extra & within
        plan: ScopePlan = plan_scopes(
            snapshot,
            pod_set,
            pods_per_node(snapshot, pod, extra) if pod_set.topology or within is not None else None,
            max_domains,
        )
        last: Unschedulable | None = None
        for scope in plan.scopes:
            last = _place_in_scope(
                snapshot,
                pod_set,
                scope.nodes,
                policy,
                hooks,
                claims,
                rng,
                placed,
                None,
                sampling,
                within=within,
            )
            if last is None:
                scopes.append((pod_set.name, scope.description))
                break
        else:
            _rollback(snapshot, placed, 0, hooks)
            why = plan.reason
            if last is not None and plan.scopes:
                why = f"{why} ({last.reason})" if why else last.reason
            return Unschedulable(
                f"{_label(workload)}: pod set {pod_set.name} {why}",
                code=Code.TOPOLOGY_DOMAIN if pod_set.topology is not None else Code.GANG_NOT_WHOLE,
            )
    return GangPlacement(workload.name, tuple(placed), tuple(scopes))


def _place_on_one_fabric(
    snap: Snapshot,
    pod_set: PodSet,
    policy: ScorePlugin,
    hooks: ReservePlugin | None,
    rng: np.random.Generator | None,
    placed: list[PodPlacement],
    fabrics: list[str],
    sampling: NodeSampling | None,
) -> str | None:
    """Gangs prefer one fabric (else one rail): try the pod set on the nodes of each fabric
    of its pool, the fabric the gang already uses first, then the roomiest; the fabric's name
    on success, None (nothing reserved) when the fleet has one fabric or none holds the set
    (the caller then places it as any pod set, across fabrics)."""
    shape = PodShape.of(pod_set.pod)
    free = snap.nics.free_of(shape.nic_pool)
    if not shape.nics or free is None or pod_set.pod.claims:
        return None
    members = snap.nics.fabrics(shape.nic_pool)
    if len(members) < 2:
        return None
    need = shape.nics * pod_set.count
    room = {name: int(free[nodes].sum()) for name, nodes in members.items()}
    order = sorted(members, key=lambda f: (f not in fabrics, -room[f], f))
    for name in order:
        if room[name] < need:
            continue
        nodes = members[name][free[members[name]] >= shape.nics]
        failed = _place_in_scope(
            snap, pod_set, nodes, policy, hooks, None, rng, placed, None, sampling, explain=False
        )
        if failed is None:
            fabrics.append(name)
            return name
    return None


def release(snapshot: Snapshot, placement: GangPlacement, policy: object = None) -> None:
    """Give back every reservation of a placed workload (in reverse order)."""
    hooks = reserve_hooks(policy)
    for done in reversed(placement.pods):
        snapshot.unreserve(done.assignment)
        if hooks is not None:
            hooks.on_unreserve(snapshot, done.pod, done.assignment)


def reserve(snapshot: Snapshot, placement: GangPlacement, policy: object = None) -> None:
    """Reserve exactly ``placement`` again (undoing a :func:`release`, e.g. when victims that
    were released to try a preemption are put back)."""
    hooks = reserve_hooks(policy)
    for pod in placement.pods:
        snapshot.reserve(pod.placement.node, pod.assignment)
        if hooks is not None:
            hooks.on_reserve(snapshot, pod.pod, pod.assignment)
