"""A tenant's bare-metal cluster: an allocation of whole hosts, with what the tenant needs to
reach them and what the provider needs to hand them over.

Nothing is installed or booted here: the provider's own provisioning (its PXE, its image
pipeline, its out-of-band management) does that. What gpuaas realises is the *allocation
record*, one JSON document per cluster under the provisioner's directory
(``<data dir>/baremetal/<tenant>/<cluster>.json``, written atomically), holding the hosts
(name, address where the inventory gives one, GPUs, topology) by pool and the tenant's SSH
public keys, which the provider's provisioning installs. ``apply`` rewrites it with the
cluster's current hosts (so a scale shows at once), ``delete`` removes it, ``manifest``
returns the same document without writing it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuaas.backends.provisioners.base import ProvisionError
from gpuaas.model.cluster import ClusterKind, ClusterNodes, ClusterSpec
from gpuaas.model.node import Node

API_VERSION = "gpuaas.io/v1"
#: node labels that give a host's address, first found wins
ADDRESS_LABELS = ("gpuaas.io/address", "slurm.schedmd.com/address")


def _host(name: str, node: Node | None) -> dict[str, Any]:
    if node is None:
        return {"name": name}
    address = next((node.labels[k] for k in ADDRESS_LABELS if k in node.labels), None)
    topology = node.topology.known()
    return {
        "name": name,
        "address": address,
        "gpus": len(node.gpus),
        "gpuModel": node.gpus[0].model if node.gpus else None,
        "topology": topology,
    }


class BareMetalProvisioner:
    """See the module docstring."""

    kind = ClusterKind.BAREMETAL

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)

    def path(self, spec: ClusterSpec) -> Path:
        return self.directory / spec.tenant / f"{spec.name}.json"

    def manifest(
        self, spec: ClusterSpec, nodes: ClusterNodes, hosts: Mapping[str, Node]
    ) -> Sequence[dict[str, Any]]:
        return [
            {
                "apiVersion": API_VERSION,
                "kind": "BareMetalAllocation",
                "metadata": {"name": spec.name, "tenant": spec.tenant},
                "spec": {
                    "pools": {
                        pool: [_host(n, hosts.get(n)) for n in sorted(names)]
                        for pool, names in nodes.pools.items()
                    },
                    "sshAuthorizedKeys": list(spec.ssh_keys),
                },
            }
        ]

    def apply(self, spec: ClusterSpec, nodes: ClusterNodes, hosts: Mapping[str, Node]) -> None:
        path = self.path(spec)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".json.tmp")
            partial.write_text(json.dumps(self.manifest(spec, nodes, hosts)[0], indent=2) + "\n")
            os.replace(partial, path)
        except OSError as exc:
            raise ProvisionError(f"cannot record the allocation at {path}: {exc}") from None

    def delete(self, spec: ClusterSpec) -> None:
        try:
            self.path(spec).unlink(missing_ok=True)
        except OSError as exc:
            raise ProvisionError(f"cannot remove {self.path(spec)}: {exc}") from None
