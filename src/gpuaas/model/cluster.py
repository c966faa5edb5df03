"""Tenant clusters: whole nodes carved from the provider's pool and given to one tenant.

A cluster is Kubernetes (in one of three distributions, all expressed as Cluster API objects
on Metal3 bare-metal hosts), a Slurm partition of the provider's slurmctld, or a bare-metal
allocation. Its nodes come in node pools (one GPU model or flavor each, with a count kept
between ``min`` and ``max``); its volumes are provisioned with it. Nodes are exclusive: a
node is in at most one cluster, and no other tenant's work lands on it.

States: ``Provisioning`` -> ``Ready`` <-> ``Scaling``; ``Deleting`` -> (gone); any -> ``Failed``
with a reason. Every change is an event with a reason, as a job's are.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from gpuaas.model.autoscale import AutoscaleSpec, IdlePoolSpec


class ClusterKind(StrEnum):
    KUBERNETES = "kubernetes"
    SLURM = "slurm"
    BAREMETAL = "baremetal"


class Distribution(StrEnum):
    """Kubernetes distributions, each with its Cluster API control-plane and bootstrap
    provider: kubeadm (upstream), RKE2 (SUSE Rancher), the assisted installer (OpenShift)."""

    UPSTREAM = "upstream"
    RANCHER = "rancher"
    OPENSHIFT = "openshift"


class ClusterState(StrEnum):
    PROVISIONING = "Provisioning"
    READY = "Ready"
    SCALING = "Scaling"
    DELETING = "Deleting"
    FAILED = "Failed"


class AccessMode(StrEnum):
    """Kubernetes' volume access modes."""

    RWO = "ReadWriteOnce"
    RWX = "ReadWriteMany"
    ROX = "ReadOnlyMany"


#: Label put on a node while it is carved into a cluster (its value: ``<tenant>.<cluster>``,
#: since a label value holds no ``/``; a taint of the same key and value keeps others off).
CLUSTER_LABEL = "gpuaas.io/cluster"


@dataclass(frozen=True, slots=True)
class NodePoolSpec:
    """``count`` nodes of one kind (``flavor`` names a ResourceFlavor, or ``gpu_model`` a GPU
    model), kept within ``[min_count, max_count]``."""

    name: str
    count: int
    min_count: int = 0
    max_count: int = 0  # 0 = ``count``
    flavor: str = ""
    gpu_model: str = ""

    @property
    def upper(self) -> int:
        return self.max_count or self.count


@dataclass(frozen=True, slots=True)
class VolumeSpec:
    """A volume provisioned with a cluster: ``size_bytes`` of ``storage_class``."""

    name: str
    size_bytes: int
    storage_class: str = "local"
    access_mode: AccessMode = AccessMode.RWO


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """What a tenant-admin asks for. ``control_plane`` counts Kubernetes control-plane
    machines (1 or 3, carved from the fleet like workers only where a pool says so; the
    provider's management cluster runs the rest); ``ssh_keys`` are recorded for bare metal."""

    name: str
    tenant: str
    kind: ClusterKind
    pools: tuple[NodePoolSpec, ...]
    distribution: Distribution | None = None  # Kubernetes only
    kubernetes_version: str = ""
    control_plane: int = 1
    volumes: tuple[VolumeSpec, ...] = ()
    ssh_keys: tuple[str, ...] = ()
    #: scale the pools between their min and max on demand and GPU utilisation (None: fixed)
    autoscale: AutoscaleSpec | None = None
    #: this cluster is the provider's idle-capacity pool (registered with a marketplace)
    idle_pool: IdlePoolSpec | None = None


@dataclass(frozen=True, slots=True)
class ClusterNodes:
    """Which fleet nodes a cluster holds, by pool (what a provisioner is told to realise)."""

    pools: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def all(self) -> tuple[str, ...]:
        return tuple(n for names in self.pools.values() for n in names)
