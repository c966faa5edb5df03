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

from collections.abc import Callable, Iterable

from gpuaas.backends.base import Backend
from gpuaas.backends.sim import SimBackend
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Node
from gpuaas.service.settings import Settings

#: The node label that names a node's backend.
BACKEND_LABEL = "gpuaas.io/backend"


def _sim(settings: Settings) -> Backend:
    return SimBackend(settings.speed)


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
FACTORIES: dict[str, Callable[[Settings], Backend]] = {"sim": _sim, "kubernetes": _kubernetes}
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
