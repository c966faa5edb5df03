"""Which provisioner realises which kind of tenant cluster, built from the server's settings
like the backends (:mod:`gpuaas.service.backends`).

``slurm``: a partition on the slurmctld the Slurm backend drives (the same ``SLURM_CONF``);
``baremetal``: allocation records under ``<data dir>/baremetal``; ``kubernetes``: Cluster API
objects, from :mod:`gpuaas.backends.provisioners.capi`, resolved lazily (the module and its
client are imported on first use only); a server without it refuses Kubernetes clusters at
creation with the reason (:func:`availability`), before anything is stored.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable

from gpuaas.backends.provisioners.base import Provisioner, ProvisionError
from gpuaas.model.cluster import ClusterKind
from gpuaas.service.settings import Settings

CAPI_MODULE = "gpuaas.backends.provisioners.capi"


def _slurm(settings: Settings) -> Provisioner:
    from gpuaas.backends.provisioners.slurm import SlurmProvisioner
    from gpuaas.backends.slurm.cli import SlurmCli

    return SlurmProvisioner(SlurmCli(settings.slurm_conf))


def _baremetal(settings: Settings) -> Provisioner:
    from gpuaas.backends.provisioners.baremetal import BareMetalProvisioner

    return BareMetalProvisioner(settings.data_dir / "baremetal")


def _kubernetes(settings: Settings) -> Provisioner:
    """The Cluster API provisioner: the module's ``from_settings(settings)``."""
    why = _capi_missing()
    if why is not None:
        raise ProvisionError(why)
    module = importlib.import_module(CAPI_MODULE)
    factory = getattr(module, "from_settings", None)
    if factory is None:
        raise ProvisionError(f"{CAPI_MODULE} has no from_settings(settings)")
    provisioner: Provisioner = factory(settings)
    return provisioner


def _capi_missing() -> str | None:
    if importlib.util.find_spec(CAPI_MODULE) is None:
        return (
            "kubernetes clusters need the Cluster API provisioner "
            f"({CAPI_MODULE}), which this server does not have yet"
        )
    return None


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
        ClusterKind.KUBERNETES.value: _capi_missing(),
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
