"""Request and response bodies of tenant clusters (``/v1/tenants/{tenant}/clusters``) and of
what the provider lets a tenant carve (``/v1/tenants/{tenant}/cluster-allowance``)."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from gpuaas.model.autoscale import MIN_POOL_GRACE, AutoscaleSpec, IdlePoolSpec
from gpuaas.model.cluster import AccessMode, ClusterKind, Distribution
from gpuaas.service.models.common import DNS_LABEL_PATTERN, ReasonView, Strict, bytes_schema

Name = str
#: a cluster's or a pool's name, as ``governance.check_name(label=True)`` checks it
_LABEL = {"pattern": DNS_LABEL_PATTERN}
#: ``_pool_allowed``: exactly one of flavor and gpuModel, said in the schema
_ONE_SOURCE = {
    "oneOf": [
        {"required": [given], "properties": {given: {"type": "string"}, other: {"type": "null"}}}
        for given, other in (("flavor", "gpuModel"), ("gpuModel", "flavor"))
    ]
}


class NodePoolIn(Strict):
    """``count`` nodes of one ``flavor`` (a ResourceFlavor's nodes) or ``gpuModel``, kept in
    ``[min, max]`` (``max`` 0 or absent: ``count``)."""

    model_config = ConfigDict(json_schema_extra=_ONE_SOURCE)

    name: Name = Field(min_length=1, max_length=63, json_schema_extra=_LABEL)
    count: int = Field(ge=0, le=100_000)
    min: int = Field(default=0, ge=0, le=100_000)
    max: int = Field(default=0, ge=0, le=100_000)
    flavor: str | None = Field(default=None, min_length=1, max_length=253)
    gpuModel: str | None = Field(default=None, min_length=1, max_length=100)


class ClusterVolumeIn(Strict):
    """A volume provisioned with the cluster (docs/storage.md): ``size`` a quantity of bytes,
    ``storageClass`` ``local``, ``nfs`` or a Kubernetes StorageClass the provider offers."""

    name: Name = Field(min_length=1, max_length=63)
    size: str | int = Field(json_schema_extra=bytes_schema(zero=False))
    storageClass: str = Field(default="local", min_length=1, max_length=253)
    accessMode: AccessMode = AccessMode.RWO


class AutoscaleIn(Strict):
    """A cluster's autoscaler (see :class:`gpuaas.model.autoscale.AutoscaleSpec`): its pools
    scale between their ``min`` and ``max``; utilisations are percentages."""

    targetUtilization: float = Field(default=70.0, gt=0, le=100)
    scaleInBelow: float = Field(default=20.0, ge=0, lt=100)
    unneededSeconds: float = Field(default=600.0, ge=0, le=30 * 86400)
    cooldownSeconds: float = Field(default=300.0, ge=0, le=86400)
    disruptionBudget: int = Field(default=1, ge=1, le=10_000)
    stabilizationSeconds: float = Field(default=0.0, ge=0, le=86400)

    def spec(self) -> AutoscaleSpec:
        """The model's spec, held to its rules (scaleInBelow under the target)."""
        out = AutoscaleSpec(self.targetUtilization, self.scaleInBelow, self.unneededSeconds,
                            self.cooldownSeconds, self.disruptionBudget,
                            self.stabilizationSeconds)  # fmt: skip
        out.check()
        return out


class IdlePoolIn(Strict):
    """Marks the cluster as the provider's idle-capacity pool (provider only)."""

    marketplace: str = Field(default="", max_length=253)
    settleSeconds: float = Field(default=300.0, ge=0, le=7 * 86400)
    graceSeconds: float = Field(default=MIN_POOL_GRACE, ge=MIN_POOL_GRACE, le=86400)
    maxNodes: int = Field(default=0, ge=0, le=100_000)

    def spec(self) -> IdlePoolSpec:
        out = IdlePoolSpec(self.marketplace, self.settleSeconds, self.graceSeconds, self.maxNodes)
        out.check()
        return out


def autoscale_spec(stored: dict[str, Any] | None) -> AutoscaleSpec | None:
    """The spec of a stored ``autoscale`` body (None: the cluster does not autoscale)."""
    return None if stored is None else AutoscaleIn.model_validate(stored).spec()


def idle_pool_spec(stored: dict[str, Any] | None) -> IdlePoolSpec | None:
    return None if stored is None else IdlePoolIn.model_validate(stored).spec()


_NOTHING = {"type": "null"}
#: ``clusters._check_kind``, said in the schema: a kubernetes cluster names its distribution and
#: has 1 or 3 control-plane machines; only it has a distribution and a Kubernetes version; only
#: bare metal records SSH keys; ``idlePool`` is the provider's (/v1/idle-pools), never here
_KIND_RULES = {
    "allOf": [
        {
            "anyOf": [
                {"properties": {"kind": {"enum": ["slurm", "baremetal"]},
                                "distribution": _NOTHING, "kubernetesVersion": _NOTHING}},
                {"required": ["distribution"],
                 "properties": {"kind": {"const": "kubernetes"},
                                "distribution": {"type": "string"},
                                "controlPlane": {"enum": [1, 3]}}},
            ]
        },
        {
            "anyOf": [
                {"properties": {"kind": {"const": "baremetal"}}},
                {"properties": {"sshKeys": {"maxItems": 0}}},
            ]
        },
        {"properties": {"idlePool": _NOTHING}},
    ]
}  # fmt: skip
#: an OpenSSH public key as ``clusters._check_kind`` reads one: a key type, then the key
SSH_KEY_PATTERN = "^[ \t]*(ssh-|ecdsa-|sk-)[!-~]*[ \t]+[!-~]"
_SSH_KEY = re.compile(SSH_KEY_PATTERN)


def _ssh_key(key: str) -> str:
    """The document's pattern first (so the server and the document read one key alike)."""
    if _SSH_KEY.match(key) is None:
        raise ValueError("expected an OpenSSH public key: 'ssh-ed25519 AAAA...'")
    return key


SshKey = Annotated[
    str,
    AfterValidator(_ssh_key),
    Field(max_length=16_384, json_schema_extra={"pattern": SSH_KEY_PATTERN}),
]


class ClusterIn(Strict):
    """A cluster to create. ``distribution`` for ``kind: kubernetes`` only (default
    ``upstream``); ``controlPlane``: Kubernetes control-plane machines (1 or 3);
    ``sshKeys``: public keys recorded for bare metal."""

    model_config = ConfigDict(json_schema_extra=_KIND_RULES)

    name: Name = Field(min_length=1, max_length=63, json_schema_extra=_LABEL)
    kind: ClusterKind
    distribution: Distribution | None = None
    kubernetesVersion: str | None = Field(default=None, min_length=1, max_length=40)
    controlPlane: int = Field(default=1, ge=1, le=7)
    pools: list[NodePoolIn] = Field(min_length=1, max_length=16)
    sshKeys: list[SshKey] = Field(default_factory=list, max_length=32)
    volumes: list[ClusterVolumeIn] = Field(default_factory=list, max_length=32)
    autoscale: AutoscaleIn | None = None
    idlePool: IdlePoolIn | None = None


class PoolCount(Strict):
    name: Name = Field(min_length=1, max_length=63)
    count: int = Field(ge=0, le=100_000)


class ScaleIn(Strict):
    """New node counts of some of the cluster's pools (the others keep theirs)."""

    pools: list[PoolCount] = Field(min_length=1, max_length=16)


class PoolOut(BaseModel):
    name: str
    flavor: str | None = None
    gpuModel: str | None = None
    count: int
    min: int
    max: int
    nodes: list[str]


class ClusterJobs(BaseModel):
    pending: int = 0
    admitted: int = 0
    running: int = 0


class AutoscaleDecisionOut(BaseModel):
    """One of the autoscaler's decisions, as its cluster event recorded it."""

    at: float
    reason: ReasonView


class AutoscaleStatus(BaseModel):
    """A cluster's autoscaler: what it was asked (the pools' ``min``/``max`` are in
    ``pools``), when it last grew and shrank the cluster, and its last decisions (newest
    first; docs/autoscaling.md)."""

    targetUtilization: float
    scaleInBelow: float
    unneededSeconds: float
    cooldownSeconds: float
    disruptionBudget: int
    stabilizationSeconds: float = 0.0
    lastScaleOut: float | None = None
    lastScaleIn: float | None = None
    decisions: list[AutoscaleDecisionOut] = []


class ClusterOut(BaseModel):
    """A cluster as it is: its pools and nodes (``releasing``: nodes being drained and given
    back), its GPUs and those its jobs hold (``allocatedGpus``, whole GPUs, fractions for
    shares), its jobs by state, where its jobs queue (``localQueue``) and its state with the
    reason of the last change."""

    name: str
    tenant: str
    kind: str
    distribution: str | None = None
    kubernetesVersion: str | None = None
    controlPlane: int | None = None
    pools: list[PoolOut]
    nodes: list[str]
    releasing: list[str]
    gpus: int
    allocatedGpus: float
    jobs: ClusterJobs
    localQueue: str
    #: the cluster's volumes, by name (``gpuaas volumes get NAME`` for their state)
    volumes: list[str] = []
    state: str
    reason: ReasonView
    createdAt: float
    updatedAt: float
    #: the autoscaler's settings and last decisions (None: the cluster does not autoscale)
    autoscale: AutoscaleStatus | None = None


class ClusterEventOut(BaseModel):
    at: float
    fromState: str | None
    toState: str
    reason: str
    #: the reason's code (see ReasonView) and the fields its sentence was built from
    code: str
    fields: dict[str, Any] | None = None


class AllowanceIn(Strict):
    """The node pools a tenant may draw its clusters from (``flavors``: ResourceFlavor names,
    ``gpuModels``: GPU model names) and the most nodes its clusters hold together."""

    flavors: list[str] = Field(default_factory=list, max_length=100)
    gpuModels: list[str] = Field(default_factory=list, max_length=100)
    nodeLimit: int = Field(ge=0, le=1_000_000)


class AllowanceOut(BaseModel):
    tenant: str
    flavors: list[str]
    gpuModels: list[str]
    nodeLimit: int
    nodesHeld: int
