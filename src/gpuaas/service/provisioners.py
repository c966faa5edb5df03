"""Which provisioner realises which kind of tenant cluster, built from the server's settings
like the backends (:mod:`gpuaas.service.backends`).

``slurm``: a partition on the slurmctld the Slurm backend drives (the same ``SLURM_CONF``);
``baremetal``: allocation records under ``<data dir>/baremetal``; ``kubernetes``: Cluster API
objects (:mod:`gpuaas.backends.provisioners.capi`, imported on first use with its client),
applied to the management cluster of ``capi_kubeconfig``, or only printed when none is set.
:func:`availability` says, per kind, why this server cannot provision it (None: it can); a
creation checks it before anything is stored.
"""

from __future__ import annotations

from collections.abc import Callable

from gpuaas.backends.provisioners.base import Provisioner
from gpuaas.model.cluster import ClusterKind
from gpuaas.service.settings import Settings


def _slurm(settings: Settings) -> Provisioner:
    from gpuaas.backends.provisioners.slurm import SlurmProvisioner
    from gpuaas.backends.slurm.cli import SlurmCli

    return SlurmProvisioner(SlurmCli(settings.slurm_conf))


def _baremetal(settings: Settings) -> Provisioner:
    from gpuaas.backends.provisioners.baremetal import BareMetalProvisioner

    return BareMetalProvisioner(settings.data_dir / "baremetal")


def _kubernetes(settings: Settings) -> Provisioner:
    from gpuaas.backends.provisioners.capi import ClusterApiProvisioner

    return ClusterApiProvisioner(
        settings.capi_kubeconfig,
        settings.capi_namespace,
        context=settings.capi_context,
        scheduler=settings.kube_target,
    )


#: How each kind's provisioner is built from the server's settings.
FACTORIES: dict[ClusterKind, Callable[[Settings], Provisioner]] = {
    ClusterKind.SLURM: _slurm,
    ClusterKind.BAREMETAL: _baremetal,
    ClusterKind.KUBERNETES: _kubernetes,
}


def availability() -> dict[str, str | None]:
    """kind -> None when this server can provision it, else why not (a creation's check)."""
    return {
        ClusterKind.SLURM.value: None,
        ClusterKind.BAREMETAL.value: None,
        ClusterKind.KUBERNETES.value: None,
    }


class Provisioners:
    """The provisioners one server uses, by kind, built on first use."""

    def __init__(self, settings: Settings, built: dict[ClusterKind, Provisioner] | None = None):
        self.settings = settings
        self._built: dict[ClusterKind, Provisioner] = dict(built or {})

    def get(self, kind: ClusterKind) -> Provisioner:
        found = self._built.get(kind)
        if found is None:
            found = FACTORIES[kind](self.settings)
            self._built[kind] = found
        return found
