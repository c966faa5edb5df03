"""The cluster autoscaler's loop: builds what :func:`gpuaas.engine.autoscale.plan` reads from
the database and the utilisation windows, and carries its decisions out through the clusters'
own scale path.

On the leader, in a thread of its own beside the cluster worker (``interval`` seconds apart;
tests call :meth:`Autoscaler.step`), one step:

1. **Views**, read in one session, for every cluster whose spec has ``autoscale`` and that
   is not being deleted: each pool's bounds (``min``, and ``max`` as stored at creation), its
   nodes and the nodes still leaving it (they count toward max), and per node:
   - *ready*: carved and realised (a carved node is cordoned until its provisioner has
     realised it; until then its GPUs are not allocatable, so it is no capacity);
   - *allocated*: the share of its GPUs that admitted or running jobs' recorded placements
     hold (a GPU any pod holds any part of counts; CPU-only pods hold none, so they never
     pin a GPU node: they are drained with it, and only add to its drain cost);
   - *util*: the :class:`~gpuaas.model.telemetry.UtilisationReader`'s window for the node
     (None or unknown: never idle);
   - *unneeded since*: when it was first seen, by this loop, ready with both allocation and
     utilisation below the scale-in threshold, kept in memory (a new leader starts the
     timers afresh, which only delays a scale-in);
   With ``stabilizationSeconds``, each pool's *recent peak* (the most nodes it needed within
   the window, :class:`~gpuaas.engine.autoscale.PeakWindow`) is kept in memory too; a new
   leader starts it at the pool's size, which only delays a scale-in by one window.
   - *drain cost*: per job with a pod there, ``(1 + hours run) * (1 + max(priority, 0) /
     1000)``: empty nodes cost 0, young and low-priority work is cheaper to requeue.
   The template node of a pool is one of its nodes (else a node of the fleet its pool
   matches) as the cluster's pods see it: the cluster's label, without its taint or a
   cordon. Pending workloads are the cluster queue's pending jobs with their stored
   structured reason; the last scale-out and scale-in are the times of the cluster's last
   autoscaler events (so cooldowns survive a restart or a new leader).
2. **Plan**: :func:`~gpuaas.engine.autoscale.plan`.
3. **Carry out**, one transaction per decision, taking the fleet's turn first (as every
   cluster and fleet change does), so each decision is checked again on what the
   transaction sees: a scale-out's nodes, free and from the idle pool, are chosen by
   :func:`~gpuaas.engine.autoscale.nodes_for_scale_out` (the what-if's one rule: never a
   node this cluster released within ``max(cooldown, 10 min)`` while another will do, and
   otherwise held back for at most that window, ``flap_wait``: no node flaps); the free ones
   are carved through :func:`~gpuaas.service.clusters.grow_pool` (held to the pool's max
   counting leaving nodes, to the tenant's node limit); a scale-in marks
   nodes through :func:`~gpuaas.service.clusters.release_pool_nodes` (drained, their jobs
   requeued with their grace period, given back by the cluster worker, as a manual
   scale-in). Every decision is a cluster event with its reason (the nodes carved added to
   its fields); a ``ScaleOutAtMax`` or ``ScaleOutShort`` is recorded when it differs from
   the cluster's last event, not every step. When too few free nodes match a scale-out, the
   idle pool's nodes chosen start being reclaimed
   (:func:`gpuaas.service.idle_pool.reclaim_nodes`, when ``reclaim``); what is still missing
   is a ``ScaleOutShort`` event with the pool, the count missing and the nodes held back. The
   choice counts the reclaims already in flight for this pool, so the pool is asked only for
   what they do not cover; the nodes it frees after the pool jobs' grace period are carved
   by a later step, since the jobs still wait.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.engine.admission.nodes import pod_request
from gpuaas.engine.autoscale import (
    FLAP_WINDOW_SECONDS,
    Action,
    ClusterView,
    Decision,
    NodeFacts,
    PeakWindow,
    Pending,
    PoolView,
    ScaleOutNodes,
    nodes_for_scale_out,
    nodes_needed,
    plan,
    waits_for_capacity,
)
from gpuaas.engine.reasons import Code, Reason, reason
from gpuaas.model.autoscale import AutoscaleSpec
from gpuaas.model.cluster import CLUSTER_LABEL, ClusterState
from gpuaas.model.job_state import ACTIVE, JobState
from gpuaas.model.node import UNSCHEDULABLE, Node
from gpuaas.model.telemetry import UtilisationReader
from gpuaas.model.workload import PodSet, Workload
from gpuaas.service.cluster_names import label_value, local_queue_name
from gpuaas.service.clusters import (
    SCALE_IN_CODES,
    SCALE_OUT_CODES,
    free_for_pool,
    grow_pool,
    hosts_of,
    last_event_at,
    matcher,
    node_rows,
    record,
    release_pool_nodes,
)
from gpuaas.service.fleet import FLEET_VERSION, nodes_from_rows, take_turn_on
from gpuaas.service.idle_pool import reclaim_candidates, reclaim_nodes
from gpuaas.service.jobs import serialized_writes, workload_of
from gpuaas.service.leader_loop import LeaderLoop
from gpuaas.service.models.clusters import autoscale_spec
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import (
    ClusterEvent,
    ClusterRow,
    IdlePoolReclaim,
    Job,
    NodeRow,
    Tenant,
)

log = logging.getLogger("gpuaas.autoscaler")

#: A scale-out whose only candidates are nodes the cluster just released waits for them to
#: leave the flap window (at most FLAP_WINDOW_SECONDS) rather than flap; see docs/autoscaling.md.
FLAP_WAIT_SECONDS = math.inf


class Autoscaler:
    """See the module docstring. ``utilisation``: the windows the service keeps (any
    :class:`~gpuaas.model.telemetry.UtilisationReader`); ``reclaim``: whether a scale-out
    short of free nodes takes some back from the idle pool (False: a shortfall is only
    recorded); ``flap_wait``: how long a cluster's oldest job waiting for capacity waits before
    a scale-out takes back a node the cluster released within the flap window, when no other
    will do (``inf``: never; the wait is then at most the window)."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        utilisation: UtilisationReader,
        is_leader: Callable[[], bool] = lambda: True,
        interval: float | None = None,
        reclaim: bool = True,
        flap_wait: float = FLAP_WAIT_SECONDS,
    ) -> None:
        self.db = db
        self.settings = settings
        self.utilisation = utilisation
        self.is_leader = is_leader
        self.interval = interval if interval is not None else max(settings.reconcile_interval, 5.0)
        self.reclaim = reclaim
        self.flap_wait = flap_wait
        #: node -> since when it has been unneeded (see the module docstring)
        self.unneeded: dict[str, float] = {}
        #: (cluster key, pool) -> its stabilization window (see the module docstring)
        self.peaks: dict[tuple[str, str], PeakWindow] = {}
        self._loop = LeaderLoop("gpuaas-autoscaler", lambda: self.interval,
                                lambda: self.is_leader(), self.step, log)  # fmt: skip

    # --- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    # --- one step -------------------------------------------------------------------------

    def step(self, now: float) -> list[Decision]:
        """Views, plan, and every decision carried out (see the module docstring); returns
        the decisions planned."""
        with self.db.sessions() as session:
            views, ids = self.views(session, now)
        decisions = plan(views, now)
        by_key = {v.key: v for v in views}
        for decision in decisions:
            view = by_key[decision.cluster]
            waited = now - min(
                (p.since for p in view.pending if waits_for_capacity(p.reason)), default=now
            )
            try:
                self._carry_out(ids[decision.cluster], view.spec, decision, now, waited)
            except Exception:
                log.exception("autoscaler: %s on %s failed", decision.action, decision.cluster)
        return decisions

    def views(self, session: Session, now: float) -> tuple[list[ClusterView], dict[str, int]]:
        """What :func:`plan` reads, for every autoscaled cluster; and their ids by key."""
        rows = [
            r
            for r in session.scalars(select(ClusterRow).order_by(ClusterRow.id))
            if r.spec.get("autoscale") is not None and r.state != ClusterState.DELETING
        ]
        if not rows:
            self.unneeded.clear()
            self.peaks.clear()
            return [], {}
        tenants = dict(session.execute(select(Tenant.id, Tenant.name)).all())
        active = list(session.scalars(select(Job).where(Job.state.in_([s.value for s in ACTIVE]))))
        on_node = _jobs_by_node(active)
        views: list[ClusterView] = []
        ids: dict[str, int] = {}
        seen: set[str] = set()
        for row in rows:
            tenant = tenants.get(row.tenant_id, str(row.tenant_id))
            spec = autoscale_spec(row.spec["autoscale"])
            assert spec is not None
            key = label_value(tenant, row.name)
            view = self._view(session, row, key, spec, on_node, now)
            seen.update(n.name for p in view.pools for n in p.nodes)
            views.append(view)
            ids[key] = row.id
        for name in set(self.unneeded) - seen:
            del self.unneeded[name]
        pools = {(v.key, p.name) for v in views for p in v.pools}
        for gone in set(self.peaks) - pools:
            del self.peaks[gone]
        return views, ids

    def _view(
        self,
        session: Session,
        row: ClusterRow,
        key: str,
        spec: AutoscaleSpec,
        on_node: Mapping[str, list[tuple[Job, list[Mapping[str, Any]]]]],
        now: float,
    ) -> ClusterView:
        members = node_rows(session, row.id)
        stored = {
            r.name: r
            for r in session.scalars(
                select(NodeRow).where(NodeRow.name.in_([m.node for m in members]))
            )
        }
        hosts = {n.name: n for n in nodes_from_rows(stored.values())}
        pools: list[PoolView] = []
        for pool in row.spec["pools"]:
            name = pool["name"]
            mine = [m for m in members if m.pool == name]
            facts = []
            for m in mine:
                if m.releasing or m.node not in hosts:
                    continue
                ready = not stored[m.node].cordoned and not stored[m.node].draining
                facts.append(self._facts(hosts[m.node], name, ready, spec, on_node, now))
            held = [hosts[m.node] for m in mine if m.node in hosts]  # by name
            template = _template(session, held, pool, key)
            if template is None:
                continue  # no node of the fleet matches the pool: nothing to grow it with
            pools.append(
                PoolView(
                    name,
                    int(pool.get("min", 0)),
                    int(pool.get("max") or pool["count"]),
                    template,
                    tuple(facts),
                    leaving=sum(1 for m in mine if m.releasing),
                    recent_peak=self._peak(key, name, spec, facts, now),
                )
            )
        last_out, last_in = _last_scales(session, row.id)
        return ClusterView(
            key,
            spec,
            tuple(pools),
            _pending(session, row, pools),
            last_out,
            last_in,
            draining=sum(1 for m in members if m.releasing),
        )

    def _peak(
        self, key: str, pool: str, spec: AutoscaleSpec, facts: list[NodeFacts], now: float
    ) -> int:
        """The pool's stabilization peak (0 without a window). A window this loop has not
        seen whole (a new leader, a new pool, a changed length) starts at the nodes the pool
        holds: it is kept at its size for one window rather than scaled in on a lull
        before the takeover that this leader never saw."""
        seconds = spec.stabilization_seconds
        if seconds <= 0:
            self.peaks.pop((key, pool), None)
            return 0
        window = self.peaks.get((key, pool))
        if window is None or window.seconds != seconds:
            window = self.peaks[(key, pool)] = PeakWindow(seconds, now, start_at=len(facts))
        return window.see(now, nodes_needed(facts))

    def _facts(
        self,
        host: Node,
        pool: str,
        ready: bool,
        spec: AutoscaleSpec,
        on_node: Mapping[str, list[tuple[Job, list[Mapping[str, Any]]]]],
        now: float,
    ) -> NodeFacts:
        held: set[int] = set()
        cost = 0.0
        for job, pods in on_node.get(host.name, ()):
            for pod in pods:
                held.update(_gpu_slots(pod.get("assignment") or {}))
            hours = (now - (job.started_at or job.admitted_at or now)) / 3600
            cost += (1 + max(0.0, hours)) * (1 + max(job.priority, 0) / 1000)
        allocated = len(held) / len(host.gpus) if host.gpus else 0.0
        util = self.utilisation.node(host.name)
        below = spec.scale_in_below_percent
        idle = (
            ready
            and allocated * 100 < below
            and util is not None
            and util.known
            and util.mean * 100 < below
        )
        if idle:
            since = self.unneeded.setdefault(host.name, now)
        else:
            self.unneeded.pop(host.name, None)
            since = None
        return NodeFacts(host.name, pool, min(1.0, allocated), util, since, cost, ready)

    # --- carrying decisions out -----------------------------------------------------------

    def _carry_out(
        self, cluster_id: int, spec: AutoscaleSpec, d: Decision, now: float, waited: float = 0.0
    ) -> None:
        with serialized_writes(self.db.engine), self.db.session() as session:
            take_turn_on(session, FLEET_VERSION)
            row = session.get(ClusterRow, cluster_id)
            if row is None or row.state == ClusterState.DELETING:
                return
            tenant = session.get(Tenant, row.tenant_id)
            assert tenant is not None
            if d.action is Action.SCALE_IN:
                gone = release_pool_nodes(session, row, d.pool, d.nodes, now)
                if gone:
                    why = (
                        d.reason
                        if list(gone) == list(d.nodes)
                        else d.reason.with_fields(nodes=gone)
                    )
                    record(session, row, ClusterState.SCALING, why, now)
                    for name in gone:
                        self.unneeded.pop(name, None)
                return
            if d.count == 0:  # at max: said once, not every step
                _record_once(session, row, d.reason, now)
                return
            choice, recent, coming, demand = self._choose(session, row, spec, d, now, waited)
            # grow_pool keeps its own (topology) choice among the free nodes allowed: every
            # free node but the recent ones the engine did not take
            grown = grow_pool(session, row, tenant, d.pool, d.count, now, self.settings.backend,
                              recent - set(choice.free))  # fmt: skip
            if grown.carved:
                why = d.reason.with_fields(count=len(grown.carved), nodes=sorted(grown.carved))
                record(session, row, ClusterState.SCALING, why, now)
            if grown.missing:
                asked = (
                    reclaim_nodes(session, choice.reclaim, now, demand) if grown.fleet_short else []
                )
                why = grown.why
                if asked or coming:
                    why += (
                        f"; {len(asked) + coming} node(s) being reclaimed from the idle pool, "
                        "free after its grace period"
                    )
                if choice.held:
                    why += (
                        f"; {choice.held} node(s) this cluster released within "
                        f"{_window(spec):.0f}s held back (no flap)"
                    )
                short = reason(Code.SCALE_OUT_SHORT, pool=d.pool, missing=grown.missing,
                               detail=why)  # fmt: skip
                _record_once(session, row, short, now)

    def _choose(
        self,
        session: Session,
        row: ClusterRow,
        spec: AutoscaleSpec,
        d: Decision,
        now: float,
        waited: float,
    ) -> tuple[ScaleOutNodes, set[str], int, dict[str, Any]]:
        """The engine's choice of the scale-out's nodes (:func:`nodes_for_scale_out`, the
        what-if's too): the free nodes of the pool, the idle pool's nodes that match it (when
        ``reclaim``), what this cluster released within its flap window, what is already
        being reclaimed for this pool. Returns the choice, the free nodes that are recent,
        the reclaims in flight and the demand they are recorded for."""
        window = _window(spec)
        released = _given_back_within(session, row.id, now - window)
        free = free_for_pool(session, row, d.pool, self.settings.backend)
        demand = {"by": "autoscaler", "cluster": d.cluster, "pool": d.pool}
        coming = sum(1 for r in session.scalars(select(IdlePoolReclaim)) if r.demand == demand)
        pool, disturbed = reclaim_candidates(session) if self.reclaim else ([], set())
        stored = next(p for p in row.spec["pools"] if p["name"] == d.pool)
        matches = matcher(session, stored.get("flavor") or "", stored.get("gpuModel") or "")
        hosts = hosts_of(session, (p.name for p in pool))
        choice = nodes_for_scale_out(
            d.count,
            free,
            pool,
            lambda n: n in hosts and matches(hosts[n]),
            released,
            now,
            window=window,
            disturbed=disturbed,
            reclaiming=coming,
            waited=waited,
            max_wait=self.flap_wait,
        )
        return choice, {n for n in free if n in released}, coming, demand


# --- reading the database ------------------------------------------------------------------


def _jobs_by_node(jobs: Iterable[Job]) -> dict[str, list[tuple[Job, list[Mapping[str, Any]]]]]:
    """node -> [(job, its pods there)] for admitted and running jobs."""
    out: dict[str, list[tuple[Job, list[Mapping[str, Any]]]]] = {}
    for job in jobs:
        pods: dict[str, list[Mapping[str, Any]]] = {}
        for pod in job.placement or []:
            if isinstance(pod, Mapping) and pod.get("node"):
                pods.setdefault(str(pod["node"]), []).append(pod)
        for node, mine in pods.items():
            out.setdefault(node, []).append((job, mine))
    return out


def _gpu_slots(assignment: Mapping[str, Any]) -> set[int]:
    """The GPU slots a recorded assignment holds any part of (whole, share, MIG, replicas)."""
    slots: set[int] = set()
    for part in ("gpus", "mig", "replicas"):
        for pair in assignment.get(part) or ():
            if isinstance(pair, list | tuple) and pair:
                slots.add(int(pair[0]))
    return slots


def _template(session: Session, held: list[Node], pool: Mapping[str, Any], key: str) -> Node | None:
    """What a new node of ``pool`` looks like to the cluster's pods: one it holds, else the
    first fleet node its pool matches; with the cluster's label, without its taint or a
    cordon."""
    node = held[0] if held else None
    if node is None:
        matches = matcher(session, pool.get("flavor") or "", pool.get("gpuModel") or "")
        rows = session.scalars(select(NodeRow).order_by(NodeRow.name))
        node = next((n for n in nodes_from_rows(rows) if matches(n)), None)
        if node is None:
            return None
    taints = [t for t in node.taints if t.key not in (CLUSTER_LABEL, UNSCHEDULABLE.key)]
    return replace(node, taints=taints, labels={**node.labels, CLUSTER_LABEL: key})


def _pending(session: Session, row: ClusterRow, pools: list[PoolView]) -> tuple[Pending, ...]:
    """The cluster queue's pending jobs with their structured reasons, as workloads."""
    jobs = session.scalars(
        select(Job)
        .where(Job.tenant_id == row.tenant_id, Job.local_queue == local_queue_name(row.name))
        .where(Job.state == JobState.PENDING.value, Job.cancel_requested.is_(False))
        .order_by(Job.id)
    )
    sliced = bool(pools) and all(
        p.template.gpus and all(g.partition.shared for g in p.template.gpus) for p in pools
    )
    out: list[Pending] = []
    for job in jobs:
        why = Reason.stored(job.reason_code, job.reason_fields)
        if why is None:
            continue
        try:
            admission = workload_of(job)
            sets = tuple(
                PodSet(
                    ps.name,
                    ps.count,
                    pod_request(
                        ps.requests,
                        ps.node_selector,
                        ps.tolerations,
                        f"podSets.{ps.name}",
                        sliced,
                        ps.network,
                    )[0],
                    ps.topology,
                )
                for ps in admission.pod_sets
            )
        except (KeyError, TypeError, ValueError):
            continue  # an unreadable spec: the reconciler fails the job
        since = job.updated_at if job.attempts else job.created_at
        out.append(Pending(job.id, Workload(str(job.id), sets, job.priority), why, since))
    return tuple(out)


def _last_scales(session: Session, cluster_id: int) -> tuple[float | None, float | None]:
    return (
        last_event_at(session, cluster_id, SCALE_OUT_CODES),
        last_event_at(session, cluster_id, SCALE_IN_CODES),
    )


def _window(spec: AutoscaleSpec) -> float:
    """How long a node this cluster released is not taken back while another will do: the
    issue's flap window, or the cluster's cooldown when that is longer."""
    return max(spec.cooldown_seconds, FLAP_WINDOW_SECONDS)


def _given_back_within(session: Session, cluster_id: int, since: float) -> dict[str, float]:
    """Nodes the autoscaler released from this cluster since ``since``, each with when it
    last did."""
    out: dict[str, float] = {}
    for at, fields in session.execute(
        select(ClusterEvent.at, ClusterEvent.reason_fields)
        .where(
            ClusterEvent.cluster_id == cluster_id,
            ClusterEvent.reason_code.in_([c.value for c in SCALE_IN_CODES]),
            ClusterEvent.at >= since,
        )
        .order_by(ClusterEvent.at)
    ):
        for name in (fields or {}).get("fields", {}).get("nodes") or ():
            out[name] = float(at)
    return out


def _record_once(session: Session, row: ClusterRow, why: Reason, now: float) -> None:
    """Record ``why`` unless the cluster's last event says the same."""
    last = session.scalar(
        select(ClusterEvent)
        .where(ClusterEvent.cluster_id == row.id)
        .order_by(ClusterEvent.id.desc())
        .limit(1)
    )
    if last is not None and last.reason_code == why.code.value:
        stored = Reason.stored(last.reason_code, last.reason_fields)
        if stored is not None and dict(stored.fields) == dict(why.fields):
            return
    record(session, row, ClusterState(row.state), why, now)
