"""An autoscaled inference job's replica set as stored: checked and created at submission,
shown in the job's view (docs/workload-autoscaling.md). The loop that scales it is
:mod:`gpuaas.service.replica_scaler`; light enough for the submission path to import.

A set is the job itself (its first replica, :class:`~gpuaas.store.tables.ReplicaSetRow` keyed
by its id) and the further replicas made for it, each a job of its own
(:class:`~gpuaas.store.tables.ReplicaMemberRow`) whose stored spec says ``replicaOf``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from gpuaas.engine.reasons import Reason
from gpuaas.model.errors import InvalidValue
from gpuaas.model.job_state import ACTIVE, UNFINISHED, JobState
from gpuaas.service.cluster_names import cluster_queue_of
from gpuaas.service.models.common import ReasonView
from gpuaas.service.models.jobs import JobSpec, ReplicaClusterView, ReplicasView
from gpuaas.store.tables import Job, ReplicaMemberRow, ReplicaSetRow

#: The key a replica's stored spec names its set's job with.
REPLICA_OF = "replicaOf"


def check_autoscale(spec: JobSpec, tenant: str, local_queues: Mapping[str, Any]) -> None:
    """Every cluster ``autoscale.clusters`` lists is one of ``tenant``'s; InvalidValue names
    ``autoscale.clusters[i]`` (another tenant's cluster is answered as one that does not
    exist)."""
    if spec.autoscale is None:
        return
    spec.autoscale.spec().check("autoscale")
    for i, name in enumerate(spec.autoscale.clusters):
        try:
            cluster_queue_of(local_queues, tenant, name)
        except InvalidValue as exc:
            raise InvalidValue(f"autoscale.clusters[{i}]", exc.problem) from None


def create_set(session: Session, job_id: int) -> None:
    """The set of a job just inserted with ``autoscale`` (it is its own first replica)."""
    session.execute(
        insert(ReplicaSetRow).values(job_id=job_id, desired=1, full={}, reason="", reason_code="")
    )


def replica_views(session: Session, jobs: Iterable[Job]) -> dict[int, ReplicasView]:
    """The replica view of each autoscaled job among ``jobs`` (two queries for them all)."""
    scaled = {job.id: job for job in jobs if job.spec.get("autoscale")}
    if not scaled:
        return {}
    sets = {
        row.job_id: row
        for row in session.scalars(select(ReplicaSetRow).where(ReplicaSetRow.job_id.in_(scaled)))
    }
    members: dict[int, list[tuple[int, str, str]]] = {}
    rows = session.execute(
        select(ReplicaMemberRow.set_id, ReplicaMemberRow.job_id, ReplicaMemberRow.cluster,
               Job.state)
        .join(Job, Job.id == ReplicaMemberRow.job_id)
        .where(ReplicaMemberRow.set_id.in_(sets), Job.state.in_(UNFINISHED))
        .order_by(ReplicaMemberRow.job_id)
    )  # fmt: skip
    for set_id, job_id, cluster, state in rows:
        members.setdefault(set_id, []).append((job_id, cluster, state))
    out: dict[int, ReplicasView] = {}
    for job_id, row in sets.items():
        job = scaled[job_id]
        autoscale = job.spec["autoscale"]
        replicas = list(members.get(job_id, []))
        if job.state in UNFINISHED:
            replicas.insert(0, (job.id, str(job.spec.get("cluster") or ""), job.state))
        running: Counter[str] = Counter()
        pending: Counter[str] = Counter()
        for _, cluster, state in replicas:
            (running if JobState(state) in ACTIVE else pending)[cluster] += 1
        order = dict.fromkeys([str(job.spec.get("cluster") or ""), *autoscale.get("clusters", [])])
        order.update(dict.fromkeys(c for _, c, _ in replicas))
        last = Reason.stored(row.reason_code, row.reason_fields)
        out[job_id] = ReplicasView(
            desired=row.desired,
            current=sum(running.values()),
            pending=sum(pending.values()),
            minReplicas=int(autoscale["minReplicas"]),
            maxReplicas=int(autoscale["maxReplicas"]),
            targetUtilization=float(autoscale.get("targetUtilization", 70.0)),
            clusters=[
                ReplicaClusterView(cluster=c, running=running[c], pending=pending[c]) for c in order
            ],
            jobs=[j for j, _, _ in replicas],
            lastDecision=None
            if last is None
            else ReasonView(code=last.code.value, message=row.reason, fields=dict(last.fields)),
            decidedAt=row.decided_at,
        )
    return out
