"""A tenant's Slurm cluster: a partition of its own on the provider's slurmctld.

``apply`` makes partition ``gpuaas.<tenant>.<cluster>`` exist with exactly the cluster's
nodes (``scontrol create partition`` the first time, ``scontrol update`` after: scale-out and
scale-in change its ``Nodes``), ``delete`` removes it (``scontrol delete``). The Slurm
backend submits every job that names the cluster to that partition (and pins it to the nodes
gpuaas placed it on with ``--nodelist``), so the cluster's jobs run only on its nodes; the
service never places another tenant's job on a carved node (the node carries the cluster's
label and taint), so no gpuaas job of anyone else lands there either.

Accounting: when slurmctld keeps accounting (``AccountingStorageType`` is not
``accounting_storage/none``), the tenant gets an account, ``gpuaas-<tenant>`` (``sacctmgr -i
add account``, kept when its clusters go: it holds the tenant's usage history), the
partition admits only that account (``AllowAccounts``), and the backend submits the
cluster's jobs with ``--account``. Without accounting there are no accounts to make or
enforce: the partition admits any account, and exclusivity rests on gpuaas placing jobs
(every gpuaas job is pinned to its nodes) and on the partition being the tenant's alone;
work submitted to Slurm behind gpuaas's back is the provider's to forbid
(``AllowGroups``/``AllowAccounts`` in its own configuration). The shared partitions of
slurm.conf are left as they are: the provider's file is not rewritten.

The partition is made ``State=UP`` with ``MaxTime=INFINITE`` (gpuaas enforces ``maxRunTime``
itself) and ``OverSubscribe=NO``. All calls are ``scontrol``/``sacctmgr`` through
:class:`~gpuaas.backends.slurm.cli.SlurmCli`: quick (one round trip to slurmctld), run by
the cluster worker, never on a request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuaas.backends.provisioners.base import ProvisionError
from gpuaas.backends.slurm.cli import SlurmCli
from gpuaas.backends.slurm.clusters import account_name, accounting_on, partition_name
from gpuaas.backends.slurm.errors import SlurmRefused
from gpuaas.model.cluster import ClusterKind, ClusterNodes, ClusterSpec
from gpuaas.model.node import Node

__all__ = ["SlurmProvisioner", "account_name", "accounting_on", "partition_name"]


class SlurmProvisioner:
    """See the module docstring."""

    kind = ClusterKind.SLURM

    def __init__(self, cli: SlurmCli | None = None) -> None:
        self.cli = cli or SlurmCli()
        self._accounting: bool | None = None

    def accounting(self) -> bool:
        if self._accounting is None:
            self._accounting = accounting_on(self.cli)
        return self._accounting

    def _exists(self, name: str) -> bool:
        try:
            out = self.cli.run("scontrol", "show", "partition", name)
        except SlurmRefused:
            return False
        return f"PartitionName={name}" in out

    def _settings(self, spec: ClusterSpec, nodes: ClusterNodes) -> list[str]:
        names = sorted(nodes.all)
        settings = [
            f"Nodes={','.join(names)}",
            "State=UP",
            "MaxTime=INFINITE",
            "OverSubscribe=NO",
        ]
        if self.accounting():
            settings.append(f"AllowAccounts={account_name(spec.tenant)}")
        return settings

    def apply(self, spec: ClusterSpec, nodes: ClusterNodes, hosts: Mapping[str, Node]) -> None:
        name = partition_name(spec.tenant, spec.name)
        try:
            if self.accounting():
                self._add_account(spec.tenant)
            verb = "update" if self._exists(name) else "create"
            self.cli.run("scontrol", verb, f"PartitionName={name}", *self._settings(spec, nodes))
        except SlurmRefused as exc:
            raise ProvisionError(f"partition {name}: {exc}") from None

    def _add_account(self, tenant: str) -> None:
        account = account_name(tenant)
        shown = self.cli.run("sacctmgr", "-n", "-P", "show", "account", account, "format=account")
        if account not in shown.split():
            self.cli.run(
                "sacctmgr", "-i", "add", "account", account, f"Description=gpuaas tenant {tenant}"
            )

    def delete(self, spec: ClusterSpec) -> None:
        name = partition_name(spec.tenant, spec.name)
        if not self._exists(name):
            return
        try:
            self.cli.run("scontrol", "delete", f"PartitionName={name}")
        except SlurmRefused as exc:
            raise ProvisionError(f"partition {name}: {exc}") from None

    def manifest(
        self, spec: ClusterSpec, nodes: ClusterNodes, hosts: Mapping[str, Node]
    ) -> Sequence[dict[str, Any]]:
        name = partition_name(spec.tenant, spec.name)
        account = account_name(spec.tenant) if self._accounting else None
        settings = [f"Nodes={','.join(sorted(nodes.all))}", "State=UP", "MaxTime=INFINITE"]
        settings += ["OverSubscribe=NO", *([f"AllowAccounts={account}"] if account else [])]
        return [
            {
                "kind": "SlurmPartition",
                "name": name,
                "tenant": spec.tenant,
                "cluster": spec.name,
                "nodes": sorted(nodes.all),
                "pools": {pool: sorted(names) for pool, names in nodes.pools.items()},
                "account": account,
                "accounting": self._accounting,
                "command": f"scontrol create PartitionName={name} {' '.join(settings)}",
            }
        ]
