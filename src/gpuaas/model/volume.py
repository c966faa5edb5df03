"""A tenant's volume: storage that outlives the jobs that mount it.

A volume is ``size_bytes`` of a storage class (``local``: a directory on this host, the embedded
default; ``nfs``: an export of the provider's NFS server; any other class: a Kubernetes
StorageClass, realised as a PersistentVolumeClaim), with an access mode, owned by one tenant and
optionally belonging to one of its clusters (by name; the cluster's provisioning makes and
deletes it). Jobs mount it by name.

States: ``Pending`` (recorded, not realised yet) -> ``Ready`` (usable: a directory exists, an
export is described, a claim is bound) or ``Failed`` (with the provisioner's reason);
``Deleting`` while its realisation is removed, then gone. Every state carries a reason: a code of
the closed set :class:`VolumeCode` plus fields, rendered as a sentence (the table is in
docs/storage.md), as a job's reasons are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from gpuaas.model.cluster import AccessMode, VolumeSpec

#: The storage class of the embedded default: a directory under the server's data dir.
LOCAL_CLASS = "local"
#: The storage class of the provider's NFS server (when the provider configured one).
NFS_CLASS = "nfs"


class VolumeState(StrEnum):
    PENDING = "Pending"
    READY = "Ready"
    FAILED = "Failed"
    DELETING = "Deleting"


class VolumeCode(StrEnum):
    """Why a volume is in its state (a closed set, as :class:`gpuaas.engine.reasons.Code`)."""

    CREATED = "Created"  # recorded, the provisioner not asked yet
    PROVISIONED = "Provisioned"  # local directory made (and its size enforcement)
    EXPORT_DESCRIBED = "ExportDescribed"  # NFS: the provider's export line is in the status
    CLAIM_PENDING = "ClaimPending"  # Kubernetes: the PVC exists, not bound yet
    CLAIM_BOUND = "ClaimBound"  # Kubernetes: the PVC is bound to a PersistentVolume
    CLAIM_RENDERED = "ClaimRendered"  # Kubernetes without a cluster to apply to: manifest only
    PROVISION_FAILED = "ProvisionFailed"
    RESIZED = "Resized"
    FULL = "Full"  # measured usage reached the size: read-write mounts are refused
    DELETING = "Deleting"


_TEMPLATES: dict[VolumeCode, str] = {
    VolumeCode.CREATED: "recorded; waiting for the {storage_class} provisioner",
    VolumeCode.PROVISIONED: "directory {path} ready, size enforced by {enforcement}",
    VolumeCode.EXPORT_DESCRIBED: (
        "export {export} described for the provider (gpuaas does not run the NFS server)"
    ),
    VolumeCode.CLAIM_PENDING: "PersistentVolumeClaim {namespace}/{claim} is {phase}",
    VolumeCode.CLAIM_BOUND: "PersistentVolumeClaim {namespace}/{claim} is Bound",
    VolumeCode.CLAIM_RENDERED: (
        "PersistentVolumeClaim {namespace}/{claim} rendered, not applied (no Kubernetes "
        "cluster configured; the manifest is in the volume's details)"
    ),
    VolumeCode.PROVISION_FAILED: "the {storage_class} provisioner failed: {detail}",
    VolumeCode.RESIZED: "resized from {before} to {after} bytes",
    VolumeCode.FULL: "full: {used} of {size} bytes used; read-write mounts are refused",
    VolumeCode.DELETING: "being deleted",
}


@dataclass(frozen=True, slots=True)
class VolumeReason:
    code: VolumeCode
    fields: Mapping[str, Any] = field(default_factory=dict)

    def render(self) -> str:
        try:
            return _TEMPLATES[self.code].format(**self.fields)
        except (KeyError, IndexError):
            return f"{self.code.value} {dict(self.fields)}"


@dataclass(frozen=True, slots=True)
class Volume:
    """A volume as a provisioner sees it: whose, what, and which cluster (may be "")."""

    tenant: str
    spec: VolumeSpec
    cluster: str = ""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def size_bytes(self) -> int:
        return self.spec.size_bytes

    @property
    def access_mode(self) -> AccessMode:
        return self.spec.access_mode


@dataclass(frozen=True, slots=True)
class Realised:
    """What a provisioner made of a volume: its state and reason, and where jobs find it:
    ``path`` a directory on the hosts that run jobs (local, Slurm, NFS mount point), ``claim``
    the PVC name in the tenant's namespace (Kubernetes); ``details`` what the provider or a
    person needs (the export line and mount options, the enforcement, the manifest)."""

    state: VolumeState
    reason: VolumeReason
    path: str = ""
    claim: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)


_NOT_ENV = re.compile(r"[^A-Z0-9_]")


def volume_env_name(name: str) -> str:
    """``GPUAAS_VOLUME_<NAME>``: where a job's processes find volume ``name`` (``-`` -> ``_``)."""
    return "GPUAAS_VOLUME_" + _NOT_ENV.sub("_", name.upper())


def mount_link(mount_path: str) -> str:
    """Where a job without a mount namespace (local processes, Slurm) sees a volume: the
    mount path made relative to its working directory (``/data/in`` -> ``data/in``); refused
    (ValueError) when it would leave that directory."""
    parts = [p for p in mount_path.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"mount path {mount_path!r} must name a directory below / without '..'")
    return "/".join(parts)
