"""The workload autoscaler's loop: carries out :func:`gpuaas.engine.replica_scaling.decide`
for every autoscaled inference job, a step of the reconciler (so leader-only, and on the
reconciler's clock).

Each step (at most every :data:`EVERY` seconds) reads the live sets (their job unfinished)
and their unfinished replicas, builds each set's view from what the reconciler holds in
memory (a replica's state, and for a pending one the reason the engine gives it now) and what
the :class:`~gpuaas.model.telemetry.UtilisationReader` measured (a replica's mean over its
window; an unknown window is None, never idle), and decides. What it decides is carried out
through the one path every job takes:

- a new replica is a job submitted for the job's user through
  :func:`gpuaas.service.jobs.prepare_job` (the same checks, its cluster's LocalQueue, the
  same quota), named ``<name>-r<ordinal>`` with the idempotency key ``replica-<id>-<ordinal>``
  (a step that runs twice never makes it twice); the reconciler's next sync queues it and
  admission decides it like any job, so it may wait with its own structured reason;
- a removed replica, and a pending one spilled to another cluster, is returned to the
  reconciler as a stop with the decision's reason: a pending one is withdrawn from its queue,
  an admitted or running one gives its quota back and is stopped on its backend with the
  backend's grace (:data:`gpuaas.backends.base.DEFAULT_GRACE`), and each is recorded
  Cancelled with that reason;
- the set keeps the desired count, when it last changed, the clusters found full and the last
  decision worth telling (stored only when it differs from the one before, so a set held at
  its max does not rewrite its row every step).

A job that ended takes its replicas with it (stopped with ``ReplicasScaledDown`` to 0).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, insert, select, update
from sqlalchemy.orm import Session, aliased

from gpuaas.engine.reasons import Code, Reason, reason
from gpuaas.engine.replica_scaling import Replica, ReplicaSetView, decide
from gpuaas.model.autoscale import ReplicaScaling
from gpuaas.model.errors import InvalidValue
from gpuaas.model.job_state import ACTIVE, FINAL, UNFINISHED, JobState
from gpuaas.model.telemetry import UtilisationReader
from gpuaas.service.auth import TenantRef
from gpuaas.service.jobs import (
    find_by_key,
    insert_job,
    prepare_job,
    serialized_writes,
    stored_reason,
)
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.replica_sets import REPLICA_OF
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, ReplicaMemberRow, ReplicaSetRow, Tenant

log = logging.getLogger("gpuaas.replicas")

#: Seconds between two passes over the sets.
EVERY = 1.0


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop replica ``job_id`` for ``reason``."""

    job_id: int
    reason: Reason


def _scaling(autoscale: Mapping[str, Any]) -> ReplicaScaling:
    return ReplicaScaling(
        int(autoscale["minReplicas"]),
        int(autoscale["maxReplicas"]),
        float(autoscale.get("targetUtilization", 70.0)),
        tuple(str(c) for c in autoscale.get("clusters", ())),
        float(autoscale.get("cooldownSeconds", 60.0)),
    )


class ReplicaScaler:
    """See the module docstring. ``every``: seconds between passes."""

    def __init__(self, db: Database, every: float = EVERY) -> None:
        self.db = db
        self.every = every
        self._at = -float("inf")

    def step(
        self,
        now: float,
        utilisation: UtilisationReader | None,
        state_of: Callable[[int], JobState | None],
        waiting: Callable[[int], Reason | None],
    ) -> list[Stop]:
        """One pass (when due); returns the replicas the reconciler must stop.

        ``state_of``: a job's state as the reconciler holds it (None: it follows no such job,
        so a replica stored as unfinished has just ended, or has just been submitted if it is
        stored as pending); ``waiting``: why a pending job waits, as the engine says now.
        """
        if now - self._at < self.every:
            return []
        self._at = now
        with self.db.sessions() as session:  # the common case: no live set, nothing to write
            stops = self._orphans(session)
            live_any = session.scalar(
                select(ReplicaSetRow.job_id)
                .join(Job, Job.id == ReplicaSetRow.job_id)
                .where(Job.state.in_(UNFINISHED))
                .limit(1)
            )
        if live_any is None:
            return stops
        with serialized_writes(self.db.engine), self.db.session() as session:
            live = session.execute(
                select(ReplicaSetRow, Job)
                .join(Job, Job.id == ReplicaSetRow.job_id)
                .where(Job.state.in_(UNFINISHED))
                .order_by(ReplicaSetRow.job_id)
            ).all()
            members: dict[int, list[tuple[int, str, str]]] = {}
            for set_id, job_id, cluster, state in session.execute(
                select(ReplicaMemberRow.set_id, ReplicaMemberRow.job_id, ReplicaMemberRow.cluster,
                       Job.state)
                .join(Job, Job.id == ReplicaMemberRow.job_id)
                .where(ReplicaMemberRow.set_id.in_([row.job_id for row, _ in live]),
                       Job.state.in_(UNFINISHED))
            ):  # fmt: skip
                members.setdefault(set_id, []).append((job_id, cluster, state))
            for row, job in live:
                found = members.get(job.id, [])
                stops.extend(
                    self._scale(session, now, row, job, found, utilisation, state_of, waiting)
                )
        return stops

    # --- one set --------------------------------------------------------------------------

    def _scale(
        self,
        session: Session,
        now: float,
        row: ReplicaSetRow,
        job: Job,
        members: list[tuple[int, str, str]],
        utilisation: UtilisationReader | None,
        state_of: Callable[[int], JobState | None],
        waiting: Callable[[int], Reason | None],
    ) -> list[Stop]:
        home = str(job.spec.get("cluster") or "")
        replicas: list[Replica] = []
        for job_id, cluster, stored in [(job.id, home, job.state), *members]:
            state = state_of(job_id)
            if state is None:
                if stored != JobState.PENDING.value:
                    continue  # ended within this step: gone
                state = JobState.PENDING  # submitted, not yet queued
            running = state in ACTIVE
            util = None
            if running and utilisation is not None:
                summary = utilisation.job(job_id)
                util = summary.mean if summary is not None and summary.known else None
            why = None if running else waiting(job_id)
            replicas.append(Replica(job_id, cluster, running, util, why, job_id == job.id))
        scaling = _scaling(job.spec["autoscale"])
        full = {str(c): float(at) for c, at in (row.full or {}).items()}
        view = ReplicaSetView(scaling, home, tuple(replicas), row.scaled_at, full)
        decision = decide(view, now)
        stops = [Stop(j, decision.reason or _gone(len(replicas))) for j in decision.remove]
        adds = list(decision.add)
        for spill in decision.spill:
            stops.append(Stop(spill.job, spill.reason))
            full[spill.from_cluster] = now
            adds.append(spill.to_cluster)
        for cluster in adds:
            if not self._add(session, now, job, cluster):
                full[cluster] = now  # it cannot take one at all (its queue is gone)
        values: dict[str, Any] = {"desired": decision.desired, "full": full}
        if decision.scaled:
            values["scaled_at"] = now
        last = Reason.stored(row.reason_code, row.reason_fields)
        told = decision.reason
        if told is not None and (last is None or not told.same(last)):
            values.update(reason=told.render(), decided_at=now, **stored_reason(told))
        if values != {"desired": row.desired, "full": row.full or {}}:
            session.execute(
                update(ReplicaSetRow).where(ReplicaSetRow.job_id == job.id).values(**values)
            )
        return stops

    def _add(self, session: Session, now: float, job: Job, cluster: str) -> bool:
        """Submit one more replica of ``job`` in ``cluster`` (``""``: the shared pool) for
        its user; False when the job cannot be submitted there any more."""
        ordinal = 1 + (
            session.scalar(
                select(func.max(ReplicaMemberRow.ordinal)).where(ReplicaMemberRow.set_id == job.id)
            )
            or 0
        )
        while find_by_key(session, job.tenant_id, job.user_id, _key(job.id, ordinal)):
            ordinal += 1  # the user took that key for a job of its own
        document = {k: v for k, v in job.spec.items() if k not in ("resolved", REPLICA_OF)}
        document.pop("autoscale", None)
        document["name"] = f"{job.name[:50].rstrip('-')}-r{ordinal}"
        document["idempotencyKey"] = _key(job.id, ordinal)
        if cluster:
            document["cluster"] = cluster
            document.pop("queue", None)  # the cluster's own queue
        else:
            document.pop("cluster", None)
        tenant = session.get(Tenant, job.tenant_id)
        if tenant is None:
            return False
        try:
            spec = JobSpec.model_validate(document)
            values = prepare_job(session, TenantRef(tenant.id, tenant.name), job.user_id,
                                 spec, now)  # fmt: skip
        except (InvalidValue, ValueError) as exc:
            log.warning("job %s: cannot add a replica in %r: %s", job.id, cluster, exc)
            return False
        values["spec"][REPLICA_OF] = job.id
        replica = insert_job(session, values)
        session.execute(
            insert(ReplicaMemberRow).values(
                job_id=replica.id, set_id=job.id, cluster=cluster, ordinal=ordinal
            )
        )
        return True

    def _orphans(self, session: Session) -> list[Stop]:
        """Replicas still unfinished whose job has ended: stopped with it."""
        parent = aliased(Job)
        rows = session.execute(
            select(ReplicaMemberRow.job_id, ReplicaMemberRow.set_id)
            .join(Job, Job.id == ReplicaMemberRow.job_id)
            .join(parent, parent.id == ReplicaMemberRow.set_id)
            .where(Job.state.in_(UNFINISHED), parent.state.in_(FINAL))
        ).all()
        left = Counter(set_id for _, set_id in rows)
        return [Stop(job_id, _gone(left[set_id])) for job_id, set_id in rows]


def _key(job_id: int, ordinal: int) -> str:
    return f"replica-{job_id}-{ordinal}"


def _gone(count: int) -> Reason:
    """Why the ``count`` replicas left of an ended job stop with it (scaled to 0)."""
    return reason(Code.REPLICAS_SCALED_DOWN, current=count, desired=0, utilization=None,
                  target=0.0)  # fmt: skip
