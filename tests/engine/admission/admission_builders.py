"""Small builders for admission tests: governance objects in a few lines."""

from __future__ import annotations

from collections.abc import Sequence

from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    Governance,
    LocalQueue,
    PreemptionPolicy,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
)


def quota_group(
    resource: str, flavors: Sequence[tuple[str, int, int | None, int | None]]
) -> ResourceGroup:
    """One resource group: (flavor, nominal, borrowingLimit, lendingLimit) per flavor."""
    return ResourceGroup(
        (resource,),
        tuple(FlavorQuotas(f, (ResourceQuota(resource, n, b, ll),)) for f, n, b, ll in flavors),
    )


def make_gov(
    cqs: Sequence[ClusterQueue], cohorts: Sequence[Cohort] = (), flavors: Sequence[str] = ()
) -> Governance:
    gov = Governance()
    names = set(flavors)
    for cq in cqs:
        for g in cq.resource_groups:
            names.update(f.name for f in g.flavors)
    for c in cohorts:
        for g in c.resource_groups:
            names.update(f.name for f in g.flavors)
    for name in sorted(names):
        gov.flavors[name] = ResourceFlavor(name)
    for cq in cqs:
        gov.cluster_queues[cq.name] = cq
        lq = LocalQueue(cq.name, "ns", cq.name)
        gov.local_queues[lq.key] = lq
    for c in cohorts:
        gov.cohorts[c.name] = c
    gov.validate()
    return gov


def cq(
    name: str,
    cpu: int,
    cohort: str | None = None,
    borrowing: int | None = None,
    lending: int | None = None,
    preemption: PreemptionPolicy = PreemptionPolicy(),
    flavor: str = "default",
    **kwargs: object,
) -> ClusterQueue:
    return ClusterQueue(
        name,
        (quota_group("cpu", [(flavor, cpu, borrowing, lending)]),),
        cohort=cohort,
        preemption=preemption,
        **kwargs,  # type: ignore[arg-type]
    )


def wl(
    name: str,
    queue: str,
    cpu: int,
    priority: int = 0,
    created: float = 0.0,
    count: int = 1,
    user: str | None = None,
) -> AdmissionWorkload:
    return AdmissionWorkload(
        name,
        f"ns/{queue}",
        (AdmissionPodSet("main", count, {"cpu": cpu}),),
        priority=priority,
        created=created,
        user=user,
    )
