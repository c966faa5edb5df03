"""How a tenant cluster is named in the fleet, the governance and the job spec: light enough
for the submission path (:mod:`gpuaas.service.jobs`) to import (see
:mod:`gpuaas.service.clusters`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuaas.model.cluster import CLUSTER_LABEL
from gpuaas.model.errors import InvalidValue

#: The LocalQueue of a cluster is this prefix and the cluster's name, in the tenant's namespace.
LOCAL_QUEUE_PREFIX = "cluster-"


def label_value(tenant: str, cluster: str) -> str:
    """The value of :data:`CLUSTER_LABEL` (and of its taint) on the cluster's nodes (a label
    value holds no ``/``; tenant and cluster names hold no ``.``)."""
    return f"{tenant}.{cluster}"


def flavor_name(tenant: str, cluster: str) -> str:
    """The ResourceFlavor (and the tenant's ClusterQueue) holding the cluster's capacity."""
    return f"cluster.{tenant}.{cluster}"


def local_queue_name(cluster: str) -> str:
    return f"{LOCAL_QUEUE_PREFIX}{cluster}"


def cluster_taint(tenant: str, cluster: str) -> dict[str, str]:
    return {"key": CLUSTER_LABEL, "value": label_value(tenant, cluster), "effect": "NoSchedule"}


def cluster_queue_of(local_queues: Mapping[str, Any], tenant: str, cluster: str) -> str:
    """The LocalQueue a job naming ``cluster`` is submitted to; InvalidValue naming
    ``cluster`` when tenant ``tenant`` has no such cluster (another tenant's cluster is
    answered exactly the same)."""
    queue = local_queue_name(cluster)
    if f"{tenant}/{queue}" not in local_queues:
        raise InvalidValue("cluster", f"tenant {tenant} has no cluster {cluster!r}")
    return queue
