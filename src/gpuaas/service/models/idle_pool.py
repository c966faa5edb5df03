"""Request and response bodies of the provider's idle-capacity pool (``/v1/idle-pools``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from gpuaas.model.cluster import ClusterKind
from gpuaas.service.models.clusters import IdlePoolIn as IdlePoolSettings
from gpuaas.service.models.common import DNS_LABEL_PATTERN, ReasonView

__all__ = ["IdlePoolIn", "IdlePoolOut", "IdlePoolSettings", "ReclaimOut"]


class IdlePoolIn(IdlePoolSettings):
    """A pool to register: its settings (those of a cluster's ``idlePool``:
    ``marketplace``, ``settleSeconds``, ``graceSeconds`` at least 30, ``maxNodes``), the
    cluster ``name`` it is, the ``tenant`` that owns it (created when it does not exist; a
    tenant of the provider's, for the marketplace, holding nothing else) and the ``kind`` of
    cluster its nodes form (a Slurm partition, a bare-metal allocation, Kubernetes)."""

    #: DNS-1123 labels (the server's ``check_name``, said in the schema)
    name: str = Field(
        default="pool",
        min_length=1,
        max_length=63,
        json_schema_extra={"pattern": DNS_LABEL_PATTERN},
    )
    tenant: str = Field(
        default="idle-pool",
        min_length=1,
        max_length=63,
        json_schema_extra={"pattern": DNS_LABEL_PATTERN},
    )
    kind: ClusterKind = ClusterKind.BAREMETAL


class ReclaimOut(BaseModel):
    """A node being given back: the pool jobs signalled, when, and the earliest eviction."""

    node: str
    requestedAt: float
    signalledAt: float | None
    evictAfter: float | None
    evicting: bool
    jobs: list[int]
    demand: dict


class IdlePoolOut(BaseModel):
    """The pool as it is: its settings, its nodes and GPUs, the nodes being reclaimed, its
    jobs by state, and how many reclaims completed (with the last latencies)."""

    name: str
    tenant: str
    kind: str
    marketplace: str
    settleSeconds: float
    graceSeconds: float
    maxNodes: int
    nodes: list[str]
    gpus: int
    reclaiming: list[ReclaimOut]
    reclaims: int
    reclaimSeconds: list[float]
    localQueue: str
    state: str
    reason: ReasonView
    createdAt: float
