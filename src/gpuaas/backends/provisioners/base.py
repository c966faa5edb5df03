"""The cluster provisioner protocol: how the service asks for a tenant cluster to exist.

The service owns the cluster's *desired* state (its spec and which fleet nodes it holds, in
the database) and decides which nodes to carve and when a node may leave (after its work is
drained). A provisioner owns only the *realisation*: Cluster API objects on a management
cluster, a Slurm partition, a bare-metal allocation record. Calls are idempotent (the
service may repeat one after a crash) and carry the whole desired state, never a delta, so
a provisioner never has to remember anything between calls. A call that cannot reach its
system raises :class:`~gpuaas.backends.base.BackendUnavailable` (the service retries); one
that is refused raises :class:`ProvisionError` with a reason a tenant-admin can act on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gpuaas.model.cluster import ClusterKind, ClusterNodes, ClusterSpec
from gpuaas.model.errors import GpuaasError
from gpuaas.model.node import Node


class ProvisionError(GpuaasError):
    """The system refused the cluster (a bad object, a partition it would not create)."""


class Provisioner(Protocol):
    """Realises tenant clusters of one :class:`ClusterKind`."""

    kind: ClusterKind

    def apply(self, spec: ClusterSpec, nodes: ClusterNodes, hosts: Mapping[str, Node]) -> None:
        """Make the cluster exist with exactly ``nodes`` (create, or scale to them);
        ``hosts`` describes every node named."""
        ...

    def delete(self, spec: ClusterSpec) -> None:
        """Remove the cluster and everything realised for it; no error if already gone."""
        ...

    def manifest(
        self, spec: ClusterSpec, nodes: ClusterNodes, hosts: Mapping[str, Node]
    ) -> Sequence[dict[str, Any]]:
        """The objects :meth:`apply` realises, as documents (Cluster API objects; for Slurm
        and bare metal a description of the partition / allocation); what
        ``gpuaas clusters manifest NAME`` prints."""
        ...
