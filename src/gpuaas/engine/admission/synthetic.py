"""A synthetic governance configuration at Kueue's performance-test scale (pure, seeded)."""

from __future__ import annotations

import random
from fractions import Fraction

from gpuaas.engine.admission.nodes import node_from_capacity
from gpuaas.model.governance import (
    AdmissionPodSet,
    AdmissionWorkload,
    ClusterQueue,
    FlavorQuotas,
    Governance,
    LocalQueue,
    PreemptionPolicy,
    ReclaimWithinCohort,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    WithinClusterQueue,
)
from gpuaas.model.node import Node

GIB = 2**30
FLAVORS = ("h100", "a100")


def build_benchmark(
    cluster_queues: int,
    cohorts: int,
    workloads: int,
    nodes: int = 0,
    seed: int = 1,
    reclaim: ReclaimWithinCohort = ReclaimWithinCohort.LOWER_PRIORITY,
) -> tuple[Governance, list[AdmissionWorkload], list[Node] | None]:
    """A governance configuration, its workloads and (optionally) nodes for the benchmark.

    Quota is sized so that about four in five workloads fit: the run exercises admission,
    borrowing and the no-fit path together.
    """
    rng = random.Random(seed)
    gov = Governance()
    for flavor in FLAVORS:
        gov.flavors[flavor] = ResourceFlavor(flavor, {"gpu": flavor})
    per_cq = max(1, workloads // max(1, cluster_queues))
    gpu_quota = max(1, int(per_cq * 2.5 * 0.8 / len(FLAVORS)))
    for i in range(cluster_queues):
        name = f"cq-{i}"
        groups = (
            ResourceGroup(
                ("cpu", "memory", "nvidia.com/gpu"),
                tuple(
                    FlavorQuotas(
                        flavor,
                        (
                            ResourceQuota("cpu", gpu_quota * 8_000, gpu_quota * 8_000),
                            ResourceQuota("memory", gpu_quota * 64 * GIB, gpu_quota * 64 * GIB),
                            ResourceQuota("nvidia.com/gpu", gpu_quota, gpu_quota),
                        ),
                    )
                    for flavor in FLAVORS
                ),
            ),
        )
        gov.cluster_queues[name] = ClusterQueue(
            name=name,
            resource_groups=groups,
            cohort=f"cohort-{i % max(1, cohorts)}" if cohorts else None,
            preemption=PreemptionPolicy(
                within_cluster_queue=WithinClusterQueue.LOWER_PRIORITY,
                reclaim_within_cohort=reclaim,
            ),
            fair_sharing_weight=Fraction(rng.choice((1, 1, 2))),
            namespace_selector={},
        )
        lq = LocalQueue("main", f"ns-{i}", name)
        gov.local_queues[lq.key] = lq
    gov.validate()
    wls = []
    for j in range(workloads):
        gpus = rng.choice((1, 1, 2, 4))
        count = rng.choice((1, 1, 1, 2))
        wls.append(
            AdmissionWorkload(
                name=f"wl-{j}",
                queue=f"ns-{rng.randrange(cluster_queues)}/main",
                pod_sets=(
                    AdmissionPodSet(
                        "main",
                        count,
                        {"cpu": gpus * 4_000, "memory": gpus * 32 * GIB, "nvidia.com/gpu": gpus},
                    ),
                ),
                priority=rng.choice((0, 0, 10, 100)),
                created=float(j),
            )
        )
    node_list = None
    if nodes:
        node_list = [
            node_from_capacity(
                f"node-{k}",
                {"gpu": FLAVORS[k % len(FLAVORS)]},
                {"cpu": 128_000, "memory": 2048 * GIB, "nvidia.com/gpu": 8},
            )
            for k in range(nodes)
        ]
    return gov, wls, node_list
