"""Backends carry admitted jobs out: the simulated fleet (the embedded default), later Slurm,
Kubernetes and local processes. The reconciler talks to them through :class:`Backend`."""

from gpuaas.backends.base import Backend, BackendEvent, BackendJob, EventKind
from gpuaas.backends.sim import SimBackend

__all__ = ["Backend", "BackendEvent", "BackendJob", "EventKind", "SimBackend"]
