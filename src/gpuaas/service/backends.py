"""Which backend carries out which job: nodes belong to a backend, a job runs on its nodes'.

A node names its backend with the label ``gpuaas.io/backend`` (``sim``, ``local``, ``slurm``,
``kubernetes``);
a node without it belongs to the server's default (``gpuaas serve --backend``, the
``GPUAAS_BACKEND`` environment variable, ``sim`` when neither is given). One control plane can
so drive a simulated fleet, the host's processes and a Slurm cluster at once; each backend is
built once, on first use, from the server's settings. A job whose pods landed on nodes of two
backends cannot run (no backend spans another's nodes) and is rejected with that reason.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable
from pathlib import Path

from gpuaas.backends.base import Backend
from gpuaas.backends.sim import SimBackend
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Node
from gpuaas.service.settings import Settings

#: The node label that names a node's backend.
BACKEND_LABEL = "gpuaas.io/backend"


def _sim(settings: Settings) -> Backend:
    return SimBackend(settings.speed)


def _local(settings: Settings) -> Backend:
    """Processes on this host: runs recorded under ``data_dir/local``, output under
    ``data_dir/logs`` (where the logs API reads it)."""
    from gpuaas.backends.local import LocalBackend
    from gpuaas.backends.logs import LogLayout

    return LocalBackend(
        settings.data_dir / "local",
        LogLayout(settings.logs_dir),
        container_runtime=settings.container_runtime,
    )


def _slurm(settings: Settings) -> Backend:
    """A Slurm cluster: slurmrestd when a socket or URL is set (the commands otherwise),
    output under ``data_dir/logs`` (a file system the Slurm nodes must share)."""
    from gpuaas.backends.logs import LogLayout
    from gpuaas.backends.slurm import SlurmBackend
    from gpuaas.backends.slurm.cli import SlurmCli
    from gpuaas.backends.slurm.rest import SlurmRest
    from gpuaas.backends.slurm.script import parse_nic_gres

    rest = None
    if settings.slurm_socket or settings.slurm_url:
        rest = SlurmRest(settings.slurm_socket, settings.slurm_url, settings.slurm_user,
                         settings.slurm_token)  # fmt: skip
    return SlurmBackend(
        LogLayout(settings.logs_dir),
        settings.slurm_state_dir or settings.data_dir / "slurm",
        rest=rest,
        cli=SlurmCli(settings.slurm_conf),
        partition=settings.slurm_partition,
        nic_gres=parse_nic_gres(settings.slurm_nic_gres),
        dataset_cache=Path(settings.slurm_dataset_cache) if settings.slurm_dataset_cache else None,
        dataset_command=(
            shlex.split(settings.slurm_dataset_command) if settings.slurm_dataset_command else None
        ),
    )


def _kubernetes(settings: Settings) -> Backend:
    from gpuaas.backends.kubernetes.backend import KubernetesBackend, connect
    from gpuaas.backends.kubernetes.manifests import ManifestOptions
    from gpuaas.backends.kubernetes.targets import Target

    options = ManifestOptions(
        target=Target.parse(settings.kube_target, "GPUAAS_KUBE_TARGET"),
        namespace=settings.kube_namespace,
        base_image=settings.kube_base_image,
    )
    return KubernetesBackend(lambda: connect(settings.kube_config, settings.kube_context), options)


#: How each backend is built from the server's settings.
FACTORIES: dict[str, Callable[[Settings], Backend]] = {
    "sim": _sim,
    "local": _local,
    "slurm": _slurm,
    "kubernetes": _kubernetes,
}
#: Names a user may give; a known name without a factory is refused with the reason below.
KNOWN = ("sim", "local", "slurm", "kubernetes")
NOT_YET: dict[str, str] = {}


def check_backend_name(name: str, field: str = "backend") -> str:
    """``name`` if this server can build that backend; InvalidValue naming ``field`` if not."""
    if name in FACTORIES:
        return name
    if name in NOT_YET:
        raise InvalidValue(field, NOT_YET[name])
    raise InvalidValue(field, f"unknown backend {name!r} (known: {', '.join(sorted(FACTORIES))})")


def backend_of_node(node: Node, default: str) -> str:
    return node.labels.get(BACKEND_LABEL, default)


class Backends:
    """The backends one reconciler drives, by name, built on first use."""

    def __init__(self, settings: Settings, built: Iterable[Backend] = ()) -> None:
        self.settings = settings
        self.default = settings.backend
        self._built: dict[str, Backend] = {b.name: b for b in built}

    def get(self, name: str) -> Backend:
        backend = self._built.get(name)
        if backend is None:
            backend = FACTORIES[check_backend_name(name)](self.settings)
            self._built[name] = backend
        return backend

    def built(self) -> list[Backend]:
        """The backends built so far (the ones that may follow jobs)."""
        return list(self._built.values())
