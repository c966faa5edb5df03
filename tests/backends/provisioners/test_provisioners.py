"""The Slurm and bare-metal provisioners without a cluster (the Slurm one against a recorded
command line; the real slurmctld is exercised in tests/backends/slurm/test_slurm_clusters.py),
and the registry: a Kubernetes cluster is refused with the reason until the Cluster API
provisioner module exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuaas.backends.provisioners.baremetal import BareMetalProvisioner
from gpuaas.backends.provisioners.base import ProvisionError
from gpuaas.backends.provisioners.capi import ClusterApiProvisioner
from gpuaas.backends.provisioners.slurm import SlurmProvisioner, account_name, partition_name
from gpuaas.backends.slurm.cli import SlurmCli
from gpuaas.backends.slurm.errors import SlurmRefused
from gpuaas.model.cluster import ClusterKind, ClusterNodes, ClusterSpec, NodePoolSpec
from gpuaas.model.devices import GPU
from gpuaas.model.node import Node
from gpuaas.model.topology import Topology
from gpuaas.service import provisioners
from gpuaas.service.settings import Settings

SPEC = ClusterSpec("hpc", "acme", ClusterKind.SLURM, (NodePoolSpec("gpu", 2),))
NODES = ClusterNodes({"gpu": ("n2", "n1")})


class RecordingCli(SlurmCli):
    """Answers like slurmctld would, and records each command."""

    def __init__(self, accounting: str = "accounting_storage/none", exists: bool = False):
        super().__init__()
        self.accounting_type = accounting
        self.exists = exists
        self.calls: list[tuple[str, ...]] = []

    def run(self, *argv: str) -> str:
        self.calls.append(argv)
        if argv[:3] == ("scontrol", "show", "config"):
            return f"AccountingStorageType   = {self.accounting_type}\nClusterName = ci\n"
        if argv[:3] == ("scontrol", "show", "partition"):
            if not self.exists:
                raise SlurmRefused(f"Partition {argv[3]} not found")
            return f"PartitionName={argv[3]}\n   Nodes=n1\n"
        if argv[:2] == ("sacctmgr", "-n"):
            return ""
        return ""


def test_a_slurm_cluster_is_a_partition_created_then_updated() -> None:
    cli = RecordingCli()
    SlurmProvisioner(cli).apply(SPEC, NODES, {})
    name = partition_name("acme", "hpc")
    assert ("scontrol", "create", f"PartitionName={name}", "Nodes=n1,n2", "State=UP",
            "MaxTime=INFINITE", "OverSubscribe=NO") in cli.calls  # fmt: skip
    assert not any(c[0] == "sacctmgr" for c in cli.calls)  # accounting off: no account
    cli = RecordingCli(exists=True)
    SlurmProvisioner(cli).apply(SPEC, ClusterNodes({"gpu": ("n1",)}), {})
    assert cli.calls[-1][:3] == ("scontrol", "update", f"PartitionName={name}")
    SlurmProvisioner(cli).delete(SPEC)
    assert cli.calls[-1] == ("scontrol", "delete", f"PartitionName={name}")


def test_with_accounting_the_tenant_gets_an_account_the_partition_admits_alone() -> None:
    cli = RecordingCli(accounting="accounting_storage/slurmdbd")
    provisioner = SlurmProvisioner(cli)
    provisioner.apply(SPEC, NODES, {})
    account = account_name("acme")
    assert any(c[:4] == ("sacctmgr", "-i", "add", "account") and c[4] == account
               for c in cli.calls)  # fmt: skip
    assert f"AllowAccounts={account}" in cli.calls[-1]
    (doc,) = provisioner.manifest(SPEC, NODES, {})
    assert doc["account"] == account and doc["nodes"] == ["n1", "n2"]


def test_a_refusal_is_a_provision_error() -> None:
    class Refusing(RecordingCli):
        def run(self, *argv: str) -> str:
            if argv[1] == "create":
                raise SlurmRefused("Invalid node name specified")
            return super().run(*argv)

    with pytest.raises(ProvisionError, match="Invalid node name"):
        SlurmProvisioner(Refusing()).apply(SPEC, NODES, {})


def test_a_bare_metal_allocation_records_hosts_and_keys(tmp_path: Path) -> None:
    spec = ClusterSpec("bm", "acme", ClusterKind.BAREMETAL, (NodePoolSpec("gpu", 1),),
                       ssh_keys=("ssh-ed25519 AAAAkey alice",))  # fmt: skip
    host = Node("n1", 64_000, 1 << 39, gpus=[GPU(0, "GPU-0", "H100-80GB", 81559)],
                topology=Topology(rack="r1"), labels={"gpuaas.io/address": "10.0.0.1"})  # fmt: skip
    provisioner = BareMetalProvisioner(tmp_path)
    provisioner.apply(spec, ClusterNodes({"gpu": ("n1",)}), {"n1": host})
    doc = json.loads((tmp_path / "acme" / "bm.json").read_text())
    assert doc["kind"] == "BareMetalAllocation"
    assert doc["spec"]["sshAuthorizedKeys"] == ["ssh-ed25519 AAAAkey alice"]
    assert doc["spec"]["pools"]["gpu"] == [{"name": "n1", "address": "10.0.0.1", "gpus": 1,
                                            "gpuModel": "H100-80GB",
                                            "topology": {"rack": "r1"}}]  # fmt: skip
    provisioner.delete(spec)
    provisioner.delete(spec)  # already gone: no error
    assert not (tmp_path / "acme" / "bm.json").exists()


def test_kubernetes_is_the_cluster_api_provisioner_of_the_settings(tmp_path: Path) -> None:
    """Without a management kubeconfig it only prints; with one, apply reaches it."""
    registry = provisioners.Provisioners(Settings(data_dir=tmp_path, capi_kubeconfig=None))
    printing = registry.get(ClusterKind.KUBERNETES)
    assert isinstance(printing, ClusterApiProvisioner) and not printing.live
    assert registry.get(ClusterKind.KUBERNETES) is printing
    config = tmp_path / "kubeconfig"
    live = provisioners.Provisioners(
        Settings(data_dir=tmp_path, capi_kubeconfig=str(config), capi_namespace="capi")
    ).get(ClusterKind.KUBERNETES)
    assert isinstance(live, ClusterApiProvisioner) and live.live
    assert live.options.namespace == "capi"
    assert provisioners.availability()["kubernetes"] is None
    assert registry.get(ClusterKind.BAREMETAL).kind is ClusterKind.BAREMETAL
    assert registry.get(ClusterKind.SLURM) is registry.get(ClusterKind.SLURM)
