"""A ClusterQueue's status, as Kueue reports it: what its workloads hold per flavor and
resource (``flavorsUsage``: ``total``, and ``borrowed``, the part above the nominal quota),
and how many workloads wait in it (``pendingWorkloads``) or hold its quota
(``reservingWorkloads`` and ``admittedWorkloads``: a job holds quota from admission until it
ends, Admitted and Running alike, so the two counts are equal here; Kueue's differ only while
admission checks run, which gpuaas has none of).

Computed from the jobs table in one grouped query, never by reading jobs one by one: the
database groups the active jobs of the queues by ClusterQueue, flavor assignment and pod-set
shape (jobs from one hardware profile share a shape, so a queue of thousands of jobs is a few
groups), and each group is charged once, times its count, by the engine's own rule
(:func:`gpuaas.engine.admission.cycle.quota_charge`: GPUs by size where the queue covers
``gpuaas.io/gpu-milli``, NIC VFs where it covers their pool). Pending jobs carry no
ClusterQueue yet; they are counted by the LocalQueue they wait in, which names one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Text, and_, case, cast, func, or_, select
from sqlalchemy.orm import Session

from gpuaas.engine.admission.cycle import quota_charge
from gpuaas.model.governance import Governance
from gpuaas.model.job_state import ACTIVE, JobState
from gpuaas.model.resources import format_amount
from gpuaas.service.jobs import cached_governance, pod_set_of
from gpuaas.service.models.governance import ClusterQueueStatus, FlavorUsage, ResourceUsage
from gpuaas.store.tables import Job

_ACTIVE = [s.value for s in ACTIVE]
_PENDING = JobState.PENDING.value


def _shape_of(session: Session) -> Any:
    """The pod sets of a job's resolved spec as JSON text (a grouping key)."""
    if session.get_bind().dialect.name == "postgresql":
        return cast(Job.spec["resolved"]["podSets"], Text)
    return func.json_extract(Job.spec, "$.resolved.podSets")


def cluster_queue_statuses(
    session: Session,
    names: Iterable[str],
    tenants: Mapping[int, str],
    gov: Governance | None = None,
) -> dict[str, ClusterQueueStatus]:
    """The status of each ClusterQueue in ``names`` (stored names) that governance knows;
    ``tenants``: tenant id -> name (to find a pending job's LocalQueue); ``gov``: the
    governance to read quotas from (default: this server's, reloaded when its version
    moved; a write passes the one it just stored)."""
    if gov is None:
        _, gov = cached_governance(session)
    wanted = [n for n in dict.fromkeys(names) if n in gov.cluster_queues]
    if not wanted:
        return {}
    feeding = {key: lq.cluster_queue for key, lq in gov.local_queues.items()}
    local_names = sorted({key.partition("/")[2] for key, cq in feeding.items() if cq in wanted})
    active = Job.state != _PENDING
    keys = (
        Job.state,
        Job.cluster_queue,
        Job.tenant_id,
        case((active, None), else_=Job.local_queue),
        case((active, cast(Job.flavors, Text)), else_=None),
        case((active, _shape_of(session)), else_=None),
    )
    rows = session.execute(
        select(*keys, func.count())
        .where(
            or_(
                and_(Job.state.in_(_ACTIVE), Job.cluster_queue.in_(wanted)),
                and_(Job.state == _PENDING, Job.local_queue.in_(local_names or [""])),
            )
        )
        .group_by(*keys)
    ).all()
    usage: dict[str, dict[tuple[str, str], int]] = {n: {} for n in wanted}
    pending = dict.fromkeys(wanted, 0)
    holding = dict.fromkeys(wanted, 0)
    for state, cq, tenant_id, local, flavors, shape, count in rows:
        if state == _PENDING:
            target = feeding.get(f"{tenants.get(tenant_id, '')}/{local}")
            if target in pending:
                pending[target] += count
            continue
        holding[cq] += count
        _charge(gov, cq, flavors, shape, count, usage[cq])
    return {
        n: ClusterQueueStatus(
            flavors_usage=_flavors_usage(gov, n, usage[n]),
            pending_workloads=pending[n],
            reserving_workloads=holding[n],
            admitted_workloads=holding[n],
        )
        for n in wanted
    }


def _charge(
    gov: Governance,
    cq: str,
    flavors_text: str | None,
    shape_text: str | None,
    count: int,
    into: dict[tuple[str, str], int],
) -> None:
    """Add ``count`` jobs of one shape and flavor assignment to ``into`` ((flavor, resource)
    -> amount). A resource the stored assignment gives no flavor is not charged (the engine
    refuses to admit such a job, so only hand-written rows have one)."""
    flavors = json.loads(flavors_text) if flavors_text else {}
    pod_sets = json.loads(shape_text) if shape_text else []
    if not isinstance(flavors, dict) or not isinstance(pod_sets, list):
        return
    covered = {
        r: gi
        for gi, g in enumerate(gov.cluster_queues[cq].resource_groups)
        for r in g.covered_resources
    }
    for raw in pod_sets:
        ps = pod_set_of(raw)
        given = flavors.get(ps.name) or {}
        for resource, amount in quota_charge(ps, covered).items():
            flavor = given.get(resource)
            if flavor is not None and amount:
                key = (flavor, resource)
                into[key] = into.get(key, 0) + amount * count


def _flavors_usage(
    gov: Governance, cq: str, usage: Mapping[tuple[str, str], int]
) -> list[FlavorUsage]:
    """Every flavor and resource of the queue's spec, in its order (zero where unused), then
    any other the jobs hold; ``borrowed``: the total above the nominal quota."""
    nominal: dict[tuple[str, str], int] = {}
    order: list[tuple[str, str]] = []
    for group in gov.cluster_queues[cq].resource_groups:
        for fq in group.flavors:
            for quota in fq.resources:
                nominal[(fq.name, quota.name)] = quota.nominal
                order.append((fq.name, quota.name))
    order += sorted(k for k in usage if k not in nominal)
    by_flavor: dict[str, list[ResourceUsage]] = {}
    for flavor, resource in order:
        total = usage.get((flavor, resource), 0)
        borrowed = max(0, total - nominal.get((flavor, resource), 0))
        by_flavor.setdefault(flavor, []).append(
            ResourceUsage(
                name=resource,
                total=format_amount(resource, total),
                borrowed=format_amount(resource, borrowed),
            )
        )
    return [FlavorUsage(name=f, resources=r) for f, r in by_flavor.items()]
