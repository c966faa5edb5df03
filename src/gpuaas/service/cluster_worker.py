"""The cluster worker: carries out what the cluster requests decided, beside admission.

Requests only store a cluster's desired state (:mod:`gpuaas.service.clusters`); this worker,
on the leader, in a thread of its own (provisioner calls may block: ``scontrol``, a
management cluster's API), takes each cluster that is Provisioning, Scaling or Deleting one
step further, every ``reconcile_interval``:

1. **Wait for the drain**: while a node leaving the cluster still holds an admitted or running
   job (the reconciler requeues them, their backend stops them with the grace period), or a
   deleted cluster still has unfinished jobs (cancelled at the deletion), nothing happens.
2. **Realise**: outside any transaction, ask the kind's provisioner to ``apply`` the cluster
   with exactly the nodes that stay (or ``delete`` it). Calls carry the whole desired state,
   so a repeat after a crash is harmless.
3. **Record**, in one transaction, unless the cluster changed meanwhile (then the next pass
   starts again from step 1): the leaving nodes are given back to the pool (label, taint,
   cordon and drain removed), the staying ones are uncordoned (carved nodes take jobs only
   once realised), the state becomes Ready with a reason and an event; a deleted cluster's
   queue, flavor and grant are removed with the cluster itself. The node changes bump
   ``fleet.version``: the admission engine applies them in place.

A provisioner that refuses (:class:`~gpuaas.backends.provisioners.base.ProvisionError`)
leaves the cluster Failed with the reason (``ProvisionFailed``), its nodes still held (a
scale or a deletion tries again); one that cannot be reached
(:class:`~gpuaas.backends.base.BackendUnavailable`) is retried, the cluster showing
``ProvisionerUnavailable``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from gpuaas.backends.base import BackendUnavailable
from gpuaas.engine.reasons import Code, reason
from gpuaas.model.cluster import ClusterKind, ClusterNodes, ClusterSpec, ClusterState
from gpuaas.model.errors import GpuaasError
from gpuaas.model.job_state import UNFINISHED
from gpuaas.model.node import Node
from gpuaas.service.clusters import (
    UNSETTLED,
    busy_nodes,
    cluster_nodes,
    give_back,
    hosts_of,
    local_queue_name,
    node_rows,
    record,
    remove_queue,
    spec_of,
)
from gpuaas.service.fleet import FLEET_VERSION, bump_version, take_turn_on
from gpuaas.service.jobs import serialized_writes
from gpuaas.service.leader_loop import LeaderLoop
from gpuaas.service.provisioners import Provisioners
from gpuaas.service.settings import Settings
from gpuaas.service.storage import delete_cluster_volumes
from gpuaas.store.db import Database
from gpuaas.store.tables import ClusterRow, Job, NodeRow, Tenant

log = logging.getLogger("gpuaas.clusters")


class ClusterWorker:
    """See the module docstring. ``is_leader``: whether this process leads (only the leader
    acts); ``provisioners``: built ones by kind (others from the settings on first use)."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        provisioners: Provisioners | None = None,
        is_leader: Callable[[], bool] = lambda: True,
    ) -> None:
        self.db = db
        self.settings = settings
        self.provisioners = provisioners or Provisioners(settings)
        self.is_leader = is_leader
        self._loop = LeaderLoop("gpuaas-clusters", lambda: settings.reconcile_interval,
                                lambda: self.is_leader(), self.advance, log)  # fmt: skip

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop()

    def advance(self, now: float) -> None:
        """One pass over the clusters that have something to do."""
        with self.db.sessions() as session:
            ids = list(
                session.scalars(
                    select(ClusterRow.id)
                    .where(ClusterRow.state.in_([s.value for s in UNSETTLED]))
                    .order_by(ClusterRow.id)
                )
            )
        for cluster_id in ids:
            try:
                self.advance_one(cluster_id, now)
            except Exception:
                log.exception("cluster %s: pass failed; it is tried again", cluster_id)

    def advance_one(self, cluster_id: int, now: float) -> None:
        with self.db.sessions() as session:
            row = session.get(ClusterRow, cluster_id)
            if row is None or row.state not in UNSETTLED:
                return
            tenant = session.get(Tenant, row.tenant_id)
            assert tenant is not None
            spec = spec_of(row, tenant.name)
            rows = node_rows(session, cluster_id)
            leaving = {r.node for r in rows if r.releasing}
            if leaving & busy_nodes(session):
                return  # the reconciler is still draining them
            deleting = row.state == ClusterState.DELETING
            if deleting and self._unfinished(session, row):
                return
            keep = cluster_nodes(rows)
            hosts = hosts_of(session, keep.all)
            stamp = row.updated_at
        done = self._realise(cluster_id, spec, keep, hosts, deleting, now)
        if not done:
            return
        # a provisioner with no system to reach (Cluster API without a management cluster)
        # realised nothing: the cluster is carved and declared, and says so
        applied = getattr(self.provisioners.get(ClusterKind(spec.kind)), "live", True)
        with serialized_writes(self.db.engine), self.db.session() as session:
            take_turn_on(session, FLEET_VERSION)
            row = session.get(ClusterRow, cluster_id)
            if row is None or row.updated_at != stamp:
                return  # changed meanwhile: start again on the next pass
            tenant = session.get(Tenant, row.tenant_id)
            assert tenant is not None
            rows = node_rows(session, cluster_id)
            if deleting:
                give_back(session, rows, now)
                delete_cluster_volumes(session, self.provisioners.settings, tenant, row.name)
                session.delete(row)
                session.flush()
                remove_queue(session, tenant, row.name, now)
            else:
                released = give_back(session, [r for r in rows if r.releasing], now)
                staying = [r.node for r in rows if not r.releasing]
                for node in session.scalars(select(NodeRow).where(NodeRow.name.in_(staying))):
                    if node.cordoned and not node.draining:
                        node.cordoned = False
                        node.updated_at = now
                if released:
                    record(session, row, ClusterState.READY,
                           reason(Code.CLUSTER_RELEASED, nodes=sorted(released)), now)  # fmt: skip
                ready = reason(Code.CLUSTER_READY, nodes=sorted(staying))
                if not applied:
                    ready = reason(
                        Code.CLUSTER_UNAPPLIED,
                        nodes=sorted(staying),
                        provisioner=spec.kind,
                        cluster=spec.name,
                    )
                record(session, row, ClusterState.READY, ready, now)
            bump_version(session, FLEET_VERSION)

    @staticmethod
    def _unfinished(session: Session, row: ClusterRow) -> bool:
        """Whether the cluster's queue still has a job not finished (cancelled at deletion)."""
        return (
            session.scalar(
                select(Job.id)
                .where(Job.tenant_id == row.tenant_id)
                .where(Job.local_queue == local_queue_name(row.name))
                .where(Job.state.in_([s.value for s in UNFINISHED]))
                .limit(1)
            )
            is not None
        )

    def _realise(
        self,
        cluster_id: int,
        spec: ClusterSpec,
        keep: ClusterNodes,
        hosts: dict[str, Node],
        deleting: bool,
        now: float,
    ) -> bool:
        """The provisioner's call; False (and the reason recorded) when it did not happen."""
        kind = ClusterKind(spec.kind)
        try:
            provisioner = self.provisioners.get(kind)
            if deleting:
                provisioner.delete(spec)
            else:
                provisioner.apply(spec, keep, hosts)
            return True
        except BackendUnavailable as exc:
            why = reason(Code.PROVISIONER_UNAVAILABLE, provisioner=kind.value, detail=str(exc))
            state = None
        except GpuaasError as exc:  # ProvisionError and the like: the system refused
            why = reason(Code.PROVISION_FAILED, provisioner=kind.value, detail=str(exc))
            state = ClusterState.FAILED
        log.warning("cluster %s/%s: %s", spec.tenant, spec.name, why.render())
        with serialized_writes(self.db.engine), self.db.session() as session:
            row = session.get(ClusterRow, cluster_id)
            if row is not None and (row.reason != why.render() or state is not None):
                record(session, row, state or ClusterState(row.state), why, now)
        return False
