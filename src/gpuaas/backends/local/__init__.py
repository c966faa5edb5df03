"""The local backend: a job's pods as real process groups on the control plane's host (see
:mod:`gpuaas.backends.local.backend`)."""

from gpuaas.backends.local.backend import LocalBackend

__all__ = ["LocalBackend"]
