"""What can go wrong talking to Slurm, told apart by what the caller should do."""

from __future__ import annotations

from gpuaas.model.errors import GpuaasError


class SlurmRefused(GpuaasError):
    """Slurm answered and refused the request (a bad partition, a node configuration that
    is not available): retrying the same request will not help. The message is Slurm's."""
