"""Request and response bodies of volumes (camelCase JSON)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gpuaas.model.cluster import AccessMode
from gpuaas.service.models.common import DNS_LABEL_PATTERN, ReasonView, bytes_schema
from gpuaas.service.models.identity import CamelIn, CamelOut


class VolumeIn(CamelIn):
    """A volume: ``size`` a quantity of bytes (``100Gi``, ``500000000``), ``storageClass``
    (``local``, ``nfs`` or a Kubernetes StorageClass the provider offers), ``accessMode`` one of
    Kubernetes' (``ReadWriteOnce``, ``ReadWriteMany``, ``ReadOnlyMany``), ``cluster`` the
    tenant's cluster it belongs to (left out: the tenant's, usable by any of its jobs). On PUT
    the name may be left out (it comes from the path); only ``size`` may change, and only grow."""

    name: str | None = None
    size: str | int = Field(json_schema_extra=bytes_schema(zero=False))
    storage_class: str = "local"
    access_mode: AccessMode = AccessMode.RWO
    cluster: str | None = Field(
        default=None, min_length=1, max_length=63, json_schema_extra={"pattern": DNS_LABEL_PATTERN}
    )


class VolumeOut(CamelOut):
    name: str
    tenant: str
    cluster: str | None
    size: str
    size_bytes: int
    storage_class: str
    access_mode: str
    state: str
    reason: ReasonView
    #: bytes used, where the provisioner sees them (local directories); null elsewhere
    used_bytes: int | None = None
    #: where jobs find it: a directory on the job hosts (local, Slurm, NFS) ...
    path: str | None = None
    #: ... or the PersistentVolumeClaim in the tenant's namespace (Kubernetes)
    claim: str | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    created_at: float
    updated_at: float
