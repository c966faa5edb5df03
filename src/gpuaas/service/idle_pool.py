"""The provider's idle-capacity pool: idle whole nodes lent to a marketplace as spot
capacity, taken back when tenants need them (docs/idle-pool.md).

Who owns it. The pool is a cluster of a tenant of the provider's own (``idle-pool`` unless
named otherwise), registered by a provider-admin through ``/v1/idle-pools`` and never through
a tenant's clusters API (a ``ClusterIn`` with ``idlePool`` is refused there, naming
``idlePool``). That tenant holds nothing else: its members are the marketplace integration's
service users, who submit the pool's jobs with ``cluster: <pool>``; no other tenant can name
the pool, see its jobs or land on its nodes (they carry the pool cluster's label and
``NoSchedule`` taint, as any cluster's do), and pool jobs run only there. At most one pool
exists: two would only compete for the same idle nodes.

What a step does (:meth:`IdlePool.step`, on the leader, from the reconciler's loop; every
write in one transaction, the signals sent before the deadline they start is stored):

1. **Signal.** A reclaim asked for (by this step's demand or by :func:`reclaim_for`) sends
   every pool job on the node its checkpoint signal: the backend's ``checkpoint(job, grace)``
   where it has one (Slurm: ``scancel --signal=TERM`` now, the job cancelled once the
   grace is over), else ``cancel(job, grace)`` (the local backend's SIGTERM to the process
   group, SIGKILL after ``grace``; the simulated fleet stops the job). The time it was sent is
   stored; nothing is evicted before ``signalled_at + grace``.
2. **Evict.** Once the grace is over the node is drained like a scale-in's (``draining``):
   the reconciler requeues its pool jobs (``NodeDrained``, Pending again in the pool's
   queue: a marketplace expects a preempted spot job to run again, from its checkpoint, when
   capacity returns), the cluster worker realises the pool without the node (the Slurm
   partition shrinks) and gives it back to the fleet. The next step sees the node gone and
   records ``PoolReclaimed`` with the latency from the request (event, counter, histogram).
3. **Demand.** Pending tenant jobs (not the pool's, not in a tenant cluster's queue: those
   are the cluster autoscaler's, which calls :func:`reclaim_for`) whose reason is a capacity
   reason are fitted on the pool's nodes by the placement engine
   (:func:`gpuaas.engine.idle_pool.nodes_for`, once per flavor of their ClusterQueue); for
   each the pool gives back the nodes it needs beyond the free nodes that fit it, chosen by
   :func:`gpuaas.engine.idle_pool.reclaim` (fewest pool jobs disturbed). A job already
   served by a reclaim in flight is not counted twice.
4. **Settle.** Free nodes (in no cluster, holding nothing, not cordoned or draining, of the
   pool's kind's backend) idle for ``settleSeconds`` join the pool, within ``maxNodes``,
   through the carving path (label, taint, cordoned until the provisioner has realised
   them). How long a node has been idle is kept by the leader in memory: a new leader
   starts counting afresh, which only delays a settle. A node reclaimed from the pool does
   not settle back within ``hold`` seconds of its reclaim (default the flap window, 10 min:
   no pool flaps); when it left is kept in memory too (a new leader forgets it, which can
   only let a node settle sooner, never hold one longer).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpuaas.engine.admission.nodes import pod_request
from gpuaas.engine.autoscale import FLAP_WINDOW_SECONDS
from gpuaas.engine.idle_pool import FreeNode, PoolNode, fitting, nodes_for, reclaim, settle
from gpuaas.engine.reasons import PLACEMENT_CODES, Code, reason
from gpuaas.model.autoscale import IdlePoolSpec
from gpuaas.model.cluster import CLUSTER_LABEL, ClusterKind, ClusterState
from gpuaas.model.errors import InvalidValue
from gpuaas.model.job_state import ACTIVE, JobState
from gpuaas.model.node import UNSCHEDULABLE, Node, Toleration
from gpuaas.model.resources import CPU, MEMORY, NVIDIA_GPU
from gpuaas.model.workload import PodSet, Workload
from gpuaas.service import governance as gv
from gpuaas.service.auth import Principal, require_platform
from gpuaas.service.cluster_names import LOCAL_QUEUE_PREFIX, flavor_name, local_queue_name
from gpuaas.service.clusters import (
    _add_queue,
    _Fleet,
    carve,
    delete_cluster,
    hosts_of,
    mark_releasing,
    node_rows,
    record,
)
from gpuaas.service.errors import conflict, invalid, not_found
from gpuaas.service.fleet import FLEET_VERSION, bump_version, take_turn_on
from gpuaas.service.jobs import serialized_writes, workload_of
from gpuaas.service.models.clusters import idle_pool_spec
from gpuaas.service.models.common import Page, ReasonView
from gpuaas.service.models.idle_pool import IdlePoolIn, IdlePoolOut, IdlePoolSettings, ReclaimOut
from gpuaas.service.provisioners import availability
from gpuaas.service.telemetry import Telemetry
from gpuaas.store.db import Database
from gpuaas.store.tables import (
    ClusterEvent,
    ClusterRow,
    GovernanceObject,
    IdlePoolReclaim,
    Job,
    NodeRow,
    Tenant,
)

log = logging.getLogger("gpuaas.idle_pool")

#: The pool cluster's one node pool.
NODE_POOL = "idle"
#: The pool's ClusterQueue is nominal: its nodes bound what it runs, as a cluster's do, and it
#: grows and shrinks with them without a governance change.
QUOTA = {CPU: "1000000", MEMORY: "10000Ti", NVIDIA_GPU: 1_000_000}
#: A pending job waits for capacity (a node could help) when its reason is one of these.
CAPACITY_CODES = frozenset(PLACEMENT_CODES) | {
    Code.FLAVOR_NODES_FULL,
    Code.PREEMPTION_WOULD_NOT_FIT,
    Code.FLAVOR_TAINT_UNTOLERATED,
}
#: Seconds between pool steps (the reconciler may step more often).
EVERY = 1.0

#: Sends a pool job its checkpoint signal with a grace period: ``(job id, grace seconds)``.
Signal = Callable[[int, float], None]


# --- reading the pool ----------------------------------------------------------------------


def pool_row(session: Session) -> ClusterRow | None:
    """The pool cluster (the one cluster whose spec has ``idlePool``), or None. A pool being
    removed (Deleting: its nodes drain back to the fleet) is no longer the pool."""
    for row in session.scalars(
        select(ClusterRow)
        .where(ClusterRow.state != ClusterState.DELETING.value)
        .order_by(ClusterRow.id)
    ):
        if (row.spec or {}).get("idlePool") is not None:
            return row
    return None


def pool_flavors(session: Session) -> frozenset[str]:
    """The pool's ResourceFlavor (its nodes grow from the whole fleet: a job asking for a node
    larger than any the pool holds now may still run there once one settles)."""
    row = pool_row(session)
    if row is None:
        return frozenset()
    return frozenset({flavor_name(_tenant_name(session, row), row.name)})


def pool_spec(row: ClusterRow) -> IdlePoolSpec:
    spec = idle_pool_spec(row.spec.get("idlePool"))
    assert spec is not None
    return spec


def _tenant_name(session: Session, row: ClusterRow) -> str:
    tenant = session.get(Tenant, row.tenant_id)
    return tenant.name if tenant is not None else str(row.tenant_id)


def pool_view(session: Session, row: ClusterRow) -> IdlePoolOut:
    spec = pool_spec(row)
    members = [r.node for r in node_rows(session, row.id)]
    hosts = hosts_of(session, members)
    reclaims = list(
        session.scalars(
            select(IdlePoolReclaim)
            .where(IdlePoolReclaim.cluster_id == row.id)
            .order_by(IdlePoolReclaim.node)
        )
    )
    done = list(
        session.scalars(
            select(ClusterEvent.reason_fields)
            .where(ClusterEvent.cluster_id == row.id)
            .where(ClusterEvent.reason_code == Code.POOL_RECLAIMED.value)
            .order_by(ClusterEvent.id)
        )
    )
    seconds = [float((f or {}).get("fields", f or {}).get("seconds", 0.0)) for f in done]
    return IdlePoolOut(
        name=row.name,
        tenant=_tenant_name(session, row),
        kind=row.kind,
        marketplace=spec.marketplace,
        settleSeconds=spec.settle_seconds,
        graceSeconds=spec.grace_seconds,
        maxNodes=spec.max_nodes,
        nodes=members,
        gpus=sum(len(h.gpus) for h in hosts.values()),
        reclaiming=[
            ReclaimOut(
                node=r.node,
                requestedAt=r.requested_at,
                signalledAt=r.signalled_at,
                evictAfter=None if r.signalled_at is None else r.signalled_at + r.grace,
                evicting=r.evicting,
                jobs=list(r.jobs or []),
                demand=dict(r.demand or {}),
            )
            for r in reclaims
        ],
        reclaims=len(seconds),
        reclaimSeconds=seconds[-20:],
        localQueue=local_queue_name(row.name),
        state=row.state,
        reason=ReasonView(code=row.reason_code, message=row.reason, fields=row.reason_fields or {}),
        createdAt=row.created_at,
    )


def get_pool(session: Session, name: str) -> ClusterRow:
    row = pool_row(session)
    if row is None or row.name != name:
        raise not_found(f"idle pool {name}")
    return row


# --- registering, changing, removing -------------------------------------------------------


def register_pool(
    session: Session,
    p: Principal,
    body: IdlePoolIn,
    now: float,
    available: Mapping[str, str | None],
) -> ClusterRow:
    """Register the pool (provider-admins): its tenant (created when missing; an existing
    one must hold no cluster or job, the pool being its only business), the pool cluster with
    no node yet (the loop settles idle nodes into it) and its queue. 409 naming ``name`` when
    a pool exists; a kind this server cannot provision, 422 naming ``kind``."""
    require_platform(p, write=True)
    spec = _checked(body)
    gv.check_name("name", body.name, label=True)
    gv.check_name("tenant", body.tenant, label=True)
    if body.kind.value not in available or available[body.kind.value] is not None:
        raise invalid("kind", available.get(body.kind.value) or f"no {body.kind} provisioner")
    take_turn_on(session, FLEET_VERSION)
    existing = pool_row(session)
    if existing is not None:
        raise conflict(f"an idle pool is registered already: {existing.name}", "name")
    tenant = session.scalar(select(Tenant).where(Tenant.name == body.tenant))
    if tenant is not None and session.scalar(
        select(ClusterRow.id).where(ClusterRow.tenant_id == tenant.id, ClusterRow.name == body.name)
    ):
        raise conflict(f"idle pool {body.name} is still being removed; try again later", "name")
    if tenant is None:
        from gpuaas.service.identity.tenants import create_tenant
        from gpuaas.service.models.identity import TenantIn

        create_tenant(session, p, TenantIn(name=body.tenant, display_name="idle-capacity pool"))
        tenant = session.scalar(select(Tenant).where(Tenant.name == body.tenant))
        assert tenant is not None
    else:
        busy = session.scalar(select(ClusterRow.id).where(ClusterRow.tenant_id == tenant.id))
        jobs = session.scalar(select(Job.id).where(Job.tenant_id == tenant.id).limit(1))
        owned = session.scalar(
            select(GovernanceObject.id).where(GovernanceObject.tenant_id == tenant.id).limit(1)
        )
        if busy is not None or jobs is not None or owned is not None or tenant.capacity:
            raise invalid(
                "tenant",
                f"tenant {tenant.name} already has capacity, queues, clusters or jobs; the "
                "pool's tenant holds the pool only (name a new tenant and it is created)",
            )
    stored = {
        "pools": [{"name": NODE_POOL, "count": 0, "max": 0}],
        "idlePool": _stored_settings(body),
    }
    row = ClusterRow(tenant_id=tenant.id, name=body.name, kind=body.kind.value, spec=stored,
                     state=ClusterState.PROVISIONING.value, reason="", reason_code="",
                     created_at=now, updated_at=now)  # fmt: skip
    session.add(row)
    session.flush()
    _add_queue(session, tenant, body.name, dict(QUOTA), now)
    record(session, row, ClusterState.PROVISIONING,
           reason(Code.POOL_REGISTERED, marketplace=spec.marketplace), now, first=True)  # fmt: skip
    session.flush()
    return row


def _checked(body: IdlePoolSettings) -> IdlePoolSpec:
    try:
        return body.spec()
    except InvalidValue as exc:
        raise invalid(exc.field, exc.problem) from None


def _stored_settings(body: IdlePoolSettings) -> dict[str, Any]:
    return body.model_dump(include=set(IdlePoolSettings.model_fields))


def update_pool(
    session: Session, p: Principal, name: str, body: IdlePoolIn, now: float
) -> ClusterRow:
    """New settings (provider-admins); a lower ``maxNodes`` takes nothing back at once (a
    pool over its limit only stops growing), a new grace applies to reclaims asked from now.
    The name, tenant and kind stay (422 naming the one that differs)."""
    require_platform(p, write=True)
    _checked(body)
    row = get_pool(session, name)
    if body.name != name:
        raise invalid("name", f"{body.name!r} differs from the name in the path {name!r}")
    if body.tenant != _tenant_name(session, row):
        raise invalid("tenant", f"the pool belongs to tenant {_tenant_name(session, row)}")
    if body.kind.value != row.kind:
        raise invalid("kind", f"the pool is a {row.kind} cluster; remove and register it again")
    spec = dict(row.spec)
    spec["idlePool"] = _stored_settings(body)
    row.spec = spec
    row.updated_at = now
    session.flush()
    return row


def remove_pool(session: Session, p: Principal, name: str, now: float) -> ClusterRow:
    """Delete the pool cluster (provider-admins): its jobs are cancelled and its nodes drained
    and given back (a forced cluster deletion); the tenant stays."""
    require_platform(p, write=True)
    row = get_pool(session, name)
    tenant = session.get(Tenant, row.tenant_id)
    assert tenant is not None
    # reclaims in flight end here: the pool's jobs are cancelled and every node drains back
    session.execute(delete(IdlePoolReclaim).where(IdlePoolReclaim.cluster_id == row.id))
    return delete_cluster(session, tenant, name, True, now)


class IdlePools:
    """The provider's idle-capacity pool (docs/idle-pool.md): a cluster of a tenant of the
    provider's own, lent to a marketplace, that takes whole nodes idle for ``settleSeconds``
    (at most ``maxNodes``) and gives them back when tenants need them, after signalling its
    jobs and waiting ``graceSeconds`` (at least 30). At most one exists."""

    kind = "IdlePool"

    def list(self, at: Any, limit: int, after: str | None, **filters: Any) -> Page[Any]:
        row = pool_row(at.session)
        items = [] if row is None or (after is not None and row.name <= after) else [row]
        return Page(items=[pool_view(at.session, r) for r in items[:limit]], next=None)

    def get(self, at: Any, name: str) -> IdlePoolOut:
        return pool_view(at.session, get_pool(at.session, name))

    def create(self, at: Any, body: IdlePoolIn) -> IdlePoolOut:
        row = register_pool(at.session, at.principal, body, time.time(), availability())
        return pool_view(at.session, row)

    def update(self, at: Any, name: str, body: IdlePoolIn) -> IdlePoolOut:
        row = update_pool(at.session, at.principal, name, body, time.time())
        return pool_view(at.session, row)

    def delete(self, at: Any, name: str) -> None:
        remove_pool(at.session, at.principal, name, time.time())


# --- the loop ------------------------------------------------------------------------------


@dataclass
class _Sent:
    """Signals decided in a transaction, sent before it commits."""

    signals: list[tuple[int, float]] = field(default_factory=list)


def _active_on(session: Session) -> dict[str, list[tuple[int, int]]]:
    """node -> [(job id, tenant id)] of the admitted and running jobs there."""
    out: dict[str, list[tuple[int, int]]] = {}
    rows = session.execute(
        select(Job.id, Job.tenant_id, Job.placement).where(Job.state.in_([s.value for s in ACTIVE]))
    )
    for job_id, tenant_id, placement in rows:
        for node in {str(p.get("node")) for p in placement or [] if isinstance(p, Mapping)}:
            out.setdefault(node, []).append((job_id, tenant_id))
    return out


def start_reclaim(
    session: Session,
    row: ClusterRow,
    nodes: Iterable[str],
    demand: Mapping[str, Any],
    now: float,
) -> list[str]:
    """Mark pool ``nodes`` as being reclaimed for ``demand``: they leave the pool (no new
    pool job lands there: cordoned, ``releasing``), their jobs are signalled by the pool's
    next step, which stores when; the event names them. Returns the nodes marked."""
    spec = pool_spec(row)
    names = sorted(set(nodes))
    if not names:
        return []
    members = {r.node: r for r in node_rows(session, row.id)}
    active = _active_on(session)
    marked: list[str] = []
    jobs: set[int] = set()
    for name in names:
        member = members.get(name)
        if member is None or member.releasing or session.get(IdlePoolReclaim, name) is not None:
            continue
        on = sorted({j for j, t in active.get(name, []) if t == row.tenant_id})
        session.add(IdlePoolReclaim(node=name, cluster_id=row.id, requested_at=now,
                                    signalled_at=None, grace=spec.grace_seconds, evicting=False,
                                    jobs=on, demand=dict(demand)))  # fmt: skip
        member.releasing = True
        node = session.scalar(select(NodeRow).where(NodeRow.name == name))
        if node is not None:
            node.cordoned = True
            node.updated_at = now
        marked.append(name)
        jobs.update(on)
    if marked:
        why = reason(Code.POOL_GRACE_STARTED, nodes=marked, jobs=sorted(jobs),
                     grace=spec.grace_seconds)  # fmt: skip
        record(session, row, ClusterState.SCALING, why, now)
        bump_version(session, FLEET_VERSION)
    return marked


def reclaim_for(
    session: Session,
    count: int,
    matches: Callable[[str], bool],
    now: float,
    demand: Mapping[str, Any] | None = None,
) -> list[str]:
    """Take up to ``count`` pool nodes that ``matches`` accepts back for tenants, fewest pool
    jobs disturbed first, in the caller's transaction (the cluster autoscaler's scale-out
    when free nodes are short). Returns the nodes now being reclaimed: they are free once
    their pool jobs' grace is over (at most the pool's ``graceSeconds`` plus a few steps);
    carve them then. No pool, or none matching: []."""
    row = pool_row(session)
    if row is None or count <= 0 or row.state == ClusterState.DELETING:
        return []
    take_turn_on(session, FLEET_VERSION)
    pool, disturbed = _pool_nodes(session, row)
    chosen = reclaim(pool, count, matches, disturbed)
    return start_reclaim(session, row, chosen, demand or {"by": "reclaim_for"}, now)


def reclaim_candidates(session: Session) -> tuple[list[PoolNode], set[int]]:
    """What a scale-out may take back from the idle pool (the cluster autoscaler's
    :func:`~gpuaas.engine.autoscale.nodes_for_scale_out` chooses among them): the pool's
    nodes not yet being reclaimed with their pool jobs, and the jobs already in their grace.
    No pool (or one being removed): nothing."""
    row = pool_row(session)
    if row is None or row.state == ClusterState.DELETING:
        return [], set()
    return _pool_nodes(session, row)


def reclaim_nodes(
    session: Session, nodes: Sequence[str], now: float, demand: Mapping[str, Any]
) -> list[str]:
    """Start reclaiming pool ``nodes`` (chosen by the caller among
    :func:`reclaim_candidates`) for ``demand``, in the caller's transaction; returns those
    marked (free once their pool jobs' grace period is over)."""
    row = pool_row(session)
    if row is None or not nodes or row.state == ClusterState.DELETING:
        return []
    take_turn_on(session, FLEET_VERSION)
    return start_reclaim(session, row, nodes, demand, now)


def _pool_nodes(session: Session, row: ClusterRow) -> tuple[list[PoolNode], set[int]]:
    """The pool's nodes not yet being reclaimed, with their pool jobs, and the jobs already
    being disturbed by reclaims in flight."""
    members = node_rows(session, row.id)
    active = _active_on(session)
    hosts = hosts_of(session, (r.node for r in members))
    pool = [
        PoolNode(r.node, len(hosts[r.node].gpus) if r.node in hosts else 0,
                 tuple(sorted({j for j, t in active.get(r.node, []) if t == row.tenant_id})))
        for r in members
        if not r.releasing
    ]  # fmt: skip
    disturbed = {
        int(j)
        for rec in session.scalars(
            select(IdlePoolReclaim).where(IdlePoolReclaim.cluster_id == row.id)
        )
        for j in rec.jobs or []
    }
    return pool, disturbed


class IdlePool:
    """The pool's loop step (see the module docstring). ``signal``: how a pool job gets its
    checkpoint signal and grace (the reconciler's backends); ``telemetry``: where reclaims are
    counted and timed."""

    def __init__(
        self,
        db: Database,
        default_backend: str,
        signal: Signal,
        telemetry: Telemetry | None = None,
        every: float = EVERY,
        hold: float = FLAP_WINDOW_SECONDS,
    ) -> None:
        self.db = db
        self.default_backend = default_backend
        self.signal = signal
        self.telemetry = telemetry
        self.every = every
        self.hold = hold
        self.idle_since: dict[str, float] = {}
        #: node -> when the pool was asked for it back (see the module docstring)
        self.left_pool: dict[str, float] = {}
        self._last = -math.inf

    def step(self, now: float) -> None:
        if now - self._last < self.every:
            return
        self._last = now
        with self.db.sessions() as session:
            if pool_row(session) is None:
                self.idle_since.clear()
                return
        with serialized_writes(self.db.engine), self.db.session() as session:
            take_turn_on(session, FLEET_VERSION)
            row = pool_row(session)
            if row is None or row.state == ClusterState.DELETING:
                return
            changed = self._released(session, row, now)
            changed |= self._evict(session, row, now)
            taken, wanted = self._demand(session, row, now)
            changed |= bool(taken)
            self._signal(session, row, now)
            changed |= self._settle(session, row, now, wanted)
            if changed:
                bump_version(session, FLEET_VERSION)

    # --- 1. signals -----------------------------------------------------------------------

    def _signal(self, session: Session, row: ClusterRow, now: float) -> None:
        """Send the checkpoint signal of every reclaim not yet signalled, then store when: a
        failure to send leaves it unsignalled (and so never evicted) until a later step."""
        recs = list(
            session.scalars(
                select(IdlePoolReclaim)
                .where(IdlePoolReclaim.cluster_id == row.id)
                .order_by(IdlePoolReclaim.node)
            )
        )
        # a job spanning several reclaimed nodes is signalled once
        sent = {int(j) for rec in recs if rec.signalled_at is not None for j in rec.jobs or []}
        active = _active_on(session)
        for rec in recs:
            if rec.signalled_at is not None:
                continue
            jobs = sorted({j for j, t in active.get(rec.node, []) if t == row.tenant_id})
            for job_id in jobs:
                if job_id not in sent:
                    self.signal(job_id, rec.grace)
                    sent.add(job_id)
            rec.jobs = sorted(set(rec.jobs or []) | set(jobs))
            rec.signalled_at = now

    # --- 2. evictions ---------------------------------------------------------------------

    def _evict(self, session: Session, row: ClusterRow, now: float) -> bool:
        """Reclaims whose grace is over: drain the node (the reconciler requeues its pool
        jobs, the cluster worker gives it back)."""
        due = [
            rec
            for rec in session.scalars(
                select(IdlePoolReclaim)
                .where(IdlePoolReclaim.cluster_id == row.id, IdlePoolReclaim.evicting.is_(False))
                .where(IdlePoolReclaim.signalled_at.is_not(None))
                .order_by(IdlePoolReclaim.node)
            )
            if now >= float(rec.signalled_at or 0.0) + rec.grace
        ]
        if not due:
            return False
        active = _active_on(session)
        jobs: set[int] = set()
        for rec in due:
            rec.evicting = True
            jobs.update(j for j, t in active.get(rec.node, []) if t == row.tenant_id)
        names = {rec.node for rec in due}
        mark_releasing(session, [r for r in node_rows(session, row.id) if r.node in names], now)
        why = reason(Code.POOL_EVICTING, nodes=[r.node for r in due], jobs=sorted(jobs))
        record(session, row, ClusterState.SCALING, why, now)
        return True

    def _released(self, session: Session, row: ClusterRow, now: float) -> bool:
        """Reclaims whose node has left the pool cluster: done, with their latency."""
        members = {r.node for r in node_rows(session, row.id)}
        done = [
            rec
            for rec in session.scalars(
                select(IdlePoolReclaim)
                .where(IdlePoolReclaim.cluster_id == row.id)
                .order_by(IdlePoolReclaim.node)
            )
            if rec.node not in members
        ]
        for rec in done:
            seconds = max(0.0, now - rec.requested_at)
            record(session, row, ClusterState(row.state),
                   reason(Code.POOL_RECLAIMED, node=rec.node, seconds=seconds), now)  # fmt: skip
            if self.telemetry is not None:
                self.telemetry.idle_pool_reclaims.inc()
                self.telemetry.idle_pool_reclaim_seconds.observe(seconds)
            self.idle_since[rec.node] = now
            self.left_pool[rec.node] = rec.requested_at
            session.delete(rec)
        if done:
            spec = dict(row.spec)
            spec["pools"] = [{"name": NODE_POOL, "count": len(members), "max": 0}]
            row.spec = spec
        return False  # the node changes were the worker's

    # --- 3. demand ------------------------------------------------------------------------

    def _demand(self, session: Session, row: ClusterRow, now: float) -> tuple[list[str], set[str]]:
        """Reclaim for pending tenant jobs waiting for capacity that pool nodes would hold.
        Returns the nodes it reclaimed and the free nodes those jobs could use (which must
        not settle into the pool meanwhile)."""
        waiting = list(
            session.scalars(
                select(Job)
                .where(Job.state == JobState.PENDING.value, Job.tenant_id != row.tenant_id)
                .where(Job.reason_code.in_([c.value for c in CAPACITY_CODES]))
                .where(~Job.local_queue.startswith(LOCAL_QUEUE_PREFIX))
                .order_by(Job.priority.desc(), Job.id)
                .limit(200)
            )
        )
        if not waiting:
            return [], set()
        served = {
            int(j)
            for rec in session.scalars(select(IdlePoolReclaim))
            for j in (rec.demand or {}).get("jobs", [])
        }
        pool, disturbed = _pool_nodes(session, row)
        fleet = _Fleet.load(session, self.default_backend)
        hosts = hosts_of(session, [n.name for n in pool])
        given_back = [_without_pool(hosts[n.name]) for n in pool if n.name in hosts]
        free = fleet.free(ClusterKind.BAREMETAL, lambda n: True)
        tenants = dict(session.execute(select(Tenant.id, Tenant.name)).all())
        taken: list[str] = []
        wanted: set[str] = set()
        for job in waiting:
            need = self._need(session, job, tenants, given_back, free)
            if need is None:
                continue
            fits, count, on_free = need
            wanted |= on_free
            if job.id in served:
                continue
            count -= len(on_free)
            left = [n for n in pool if n.name not in taken]
            if count <= 0 or not left:
                continue
            chosen = reclaim(left, count, lambda name, f=fits: name in f, disturbed)
            if not chosen:
                continue
            marked = start_reclaim(session, row, chosen, {"jobs": [job.id]}, now)
            taken.extend(marked)
            for n in pool:
                if n.name in marked:
                    disturbed.update(n.jobs)
        return taken, wanted

    def _need(
        self,
        session: Session,
        job: Job,
        tenants: Mapping[int, str],
        given_back: list[Node],
        free: list[Node],
    ) -> tuple[frozenset[str], int, frozenset[str]] | None:
        """(pool nodes that fit ``job``, nodes its placement needs, free nodes that fit it),
        trying each flavor of its ClusterQueue; None when the pool cannot hold it."""
        try:
            admission = workload_of(job)
        except (KeyError, TypeError, ValueError):
            return None
        for labels, tolerations in _flavors_of(session, tenants.get(job.tenant_id, ""), job):
            try:
                pod_sets = tuple(
                    PodSet(ps.name, ps.count,
                           pod_request(ps.requests, labels, tolerations, ps.name)[0], ps.topology)
                    for ps in admission.pod_sets
                )  # fmt: skip
            except InvalidValue:
                return None
            workload = Workload(admission.name, pod_sets, admission.priority)
            found = nodes_for(workload, given_back)
            if found is None:
                continue
            fits, count = found
            return fits, count, fitting(workload, free)
        return None

    # --- 4. settle ------------------------------------------------------------------------

    def _settle(self, session: Session, row: ClusterRow, now: float, wanted: set[str]) -> bool:
        """Idle nodes into the pool; none while a reclaim is in flight (the pool is giving
        nodes to tenants), and never a free node a waiting tenant job could use."""
        spec = pool_spec(row)
        in_flight = select(IdlePoolReclaim.node).where(IdlePoolReclaim.cluster_id == row.id)
        if session.scalar(in_flight.limit(1)) is not None:
            return False
        fleet = _Fleet.load(session, self.default_backend)
        free = [
            n for n in fleet.free(ClusterKind(row.kind), lambda n: True) if n.name not in wanted
        ]
        names = {n.name for n in free}
        for gone in set(self.idle_since) - names:
            del self.idle_since[gone]
        for gone in [n for n, at in self.left_pool.items() if now - at > self.hold]:
            del self.left_pool[gone]
        offered = [
            FreeNode(n.name, self.idle_since.setdefault(n.name, now), len(n.gpus),
                     self.left_pool.get(n.name))
            for n in free
        ]  # fmt: skip
        members = node_rows(session, row.id)
        staying = [r for r in members if not r.releasing]
        chosen = settle(offered, spec, len(staying), now, self.hold)
        if not chosen:
            return False
        tenant = _tenant_name(session, row)
        carve(session, row, tenant, NODE_POOL, chosen, now)
        for name in chosen:
            self.idle_since.pop(name, None)
        stored = dict(row.spec)
        stored["pools"] = [{"name": NODE_POOL, "count": len(members) + len(chosen), "max": 0}]
        row.spec = stored
        record(session, row, ClusterState.SCALING, reason(Code.POOL_SETTLED, nodes=chosen), now)
        return True


def _without_pool(node: Node) -> Node:
    """``node`` as it will be once given back: without the pool cluster's label and taint,
    and schedulable."""
    labels = {k: v for k, v in node.labels.items() if k != CLUSTER_LABEL}
    taints = [t for t in node.taints if t.key != CLUSTER_LABEL and t != UNSCHEDULABLE]
    return dataclasses.replace(node, labels=labels, taints=taints)


def _flavors_of(
    session: Session, tenant: str, job: Job
) -> list[tuple[dict[str, str], list[Toleration]]]:
    """The node labels and tolerations of each flavor of the job's ClusterQueue (one empty
    entry when they cannot be read: any node)."""
    local = gv.find_object(session, gv.LOCAL_QUEUE, job.local_queue, tenant)
    cq_name = ((local.document if local else {}).get("spec") or {}).get("clusterQueue")
    cq = gv.find_object(session, gv.CLUSTER_QUEUE, cq_name) if cq_name else None
    if cq is None:
        return [({}, [])]
    out: list[tuple[dict[str, str], list[Toleration]]] = []
    for group in (cq.document.get("spec") or {}).get("resourceGroups") or []:
        for entry in group.get("flavors") or []:
            flavor = gv.find_object(session, gv.FLAVOR, entry.get("name", ""))
            spec = ((flavor.document if flavor else {}).get("spec")) or {}
            tolerations = [
                Toleration(t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""),
                           t.get("effect", ""))
                for t in spec.get("tolerations") or []
            ]  # fmt: skip
            out.append((dict(spec.get("nodeLabels") or {}), tolerations))
    return out or [({}, [])]
