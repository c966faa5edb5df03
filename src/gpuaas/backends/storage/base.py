"""The storage provisioner protocol: how the service asks for a volume to exist.

Who owns what. The service owns the volume's *desired* state (its row: name, size, class,
access mode, cluster) and every decision about it: the tenant's storage quota, who may mount it,
whether it may be deleted (no unfinished job mounts it). A provisioner owns only the
*realisation*: a directory (and, where the machine allows, the loop-mounted image that bounds
it), the description of an NFS export, a PersistentVolumeClaim. Calls carry the whole desired
state (the :class:`~gpuaas.model.volume.Volume`), never a delta, and are idempotent: the
service may repeat one after a crash, and a provisioner remembers nothing between calls beyond
what it made on its system. A call that cannot reach its system raises
:class:`~gpuaas.backends.base.BackendUnavailable`; one that is refused raises
:class:`~gpuaas.backends.provisioners.base.ProvisionError` with a reason a tenant-admin can act
on, which the service records as the volume's ``Failed`` state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from gpuaas.model.volume import Realised, Volume


class StorageProvisioner(Protocol):
    """Realises the volumes of one storage class."""

    storage_class: str

    def provision(self, volume: Volume) -> Realised:
        """Make ``volume`` exist at its size (create it, or grow it); what was made."""
        ...

    def observe(self, volume: Volume, realised: Realised) -> Realised:
        """Its state now (a claim bound, a directory full), from what :meth:`provision` made."""
        ...

    def usage(self, volume: Volume) -> int | None:
        """Bytes used, where this provisioner can see them (None: it cannot)."""
        ...

    def delete(self, volume: Volume) -> None:
        """Remove what was realised for ``volume``; no error if already gone."""
        ...

    def manifest(self, volume: Volume) -> Sequence[dict[str, Any]]:
        """What :meth:`provision` realises, as documents (a PVC; for a directory or an
        export, a description of it)."""
        ...
