"""NFS exports described for the provider (storage class ``nfs``).

gpuaas does not run the NFS server, so it cannot make an export, create its directory or bound
its size. What it does: give every volume a fixed place on the provider's server
(``<export root>/<tenant>/<name>``) and describe, in the volume's status, exactly what the
provider applies there: the ``/etc/exports`` line (the clients the provider configured, ``rw`` or
``ro`` from the access mode, ``sync,no_subtree_check,root_squash``), the mount the job hosts make
(``<server>:<export>`` on ``<mount root>/<tenant>/<name>``, ``nfs`` with
``vers=4.2,hard,proto=tcp,timeo=600,retrans=2``) as an ``/etc/fstab`` line, and the size the
provider should hold it to (a quota on the server's file system, e.g. an XFS project quota on
the export's directory). The volume is ``Ready`` once described: jobs on the local and Slurm
backends are pointed at the mount path, which exists only once the provider has done its part.
Deleting a volume deletes nothing on the server; the description says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuaas.model.cluster import AccessMode
from gpuaas.model.volume import NFS_CLASS, Realised, Volume, VolumeCode, VolumeReason, VolumeState

#: Mount options a job host uses: NFS 4.2 over TCP, hard mounts (a job waits out a server
#: restart rather than seeing I/O errors), the Linux defaults for timeouts spelled out.
MOUNT_OPTIONS = "vers=4.2,hard,proto=tcp,timeo=600,retrans=2"
EXPORT_OPTIONS = "sync,no_subtree_check,root_squash"


class NfsExports:
    """See the module docstring. ``server``: the NFS server's host name; ``export_root``: the
    directory on it under which volumes live; ``clients``: the ``/etc/exports`` client
    specification of the job hosts (e.g. ``10.0.0.0/16``); ``mount_root``: where the job hosts
    mount the volumes."""

    storage_class = NFS_CLASS

    def __init__(
        self, server: str, export_root: str, clients: str, mount_root: str = "/mnt/gpuaas"
    ) -> None:
        self.server = server
        self.export_root = export_root.rstrip("/") or "/"
        self.clients = clients
        self.mount_root = mount_root.rstrip("/") or "/"

    def export_path(self, volume: Volume) -> str:
        return f"{self.export_root}/{volume.tenant}/{volume.name}"

    def mount_path(self, volume: Volume) -> str:
        return f"{self.mount_root}/{volume.tenant}/{volume.name}"

    def provision(self, volume: Volume) -> Realised:
        export = self.export_path(volume)
        reason = VolumeReason(VolumeCode.EXPORT_DESCRIBED, {"export": f"{self.server}:{export}"})
        return Realised(
            VolumeState.READY, reason, self.mount_path(volume), details=self.describe(volume)
        )

    def observe(self, volume: Volume, realised: Realised) -> Realised:
        return self.provision(volume)

    def usage(self, volume: Volume) -> int | None:
        return None  # on the provider's server, out of sight

    def delete(self, volume: Volume) -> None:
        return None  # the export is the provider's to remove (the description says so)

    def manifest(self, volume: Volume) -> Sequence[dict[str, Any]]:
        return [self.describe(volume)]

    def describe(self, volume: Volume) -> dict[str, Any]:
        """What the provider applies on its server and the job hosts for ``volume``."""
        export, target = self.export_path(volume), self.mount_path(volume)
        mode = "ro" if volume.access_mode is AccessMode.ROX else "rw"
        return {
            "kind": "NfsExport",
            "server": self.server,
            "export": export,
            "exportLine": f"{export} {self.clients}({mode},{EXPORT_OPTIONS})",
            "mount": {
                "source": f"{self.server}:{export}",
                "target": target,
                "type": "nfs",
                "options": MOUNT_OPTIONS,
            },
            "fstabLine": f"{self.server}:{export} {target} nfs {MOUNT_OPTIONS} 0 0",
            "sizeBytes": volume.size_bytes,
            "provider": (
                f"create {export} on {self.server}, hold it to {volume.size_bytes} bytes with a "
                "quota on the server's file system, add the export line and run exportfs -ra, "
                f"mount it on every job host at {target}; deleting the volume in gpuaas removes "
                "none of this"
            ),
        }
