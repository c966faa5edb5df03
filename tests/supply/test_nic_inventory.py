"""NICs in the supply plane: the inventory's ``nics:`` (one NIC, a run with ``{k}``, node
patterns), refused with the field named; the devices they publish beside the GPUs, selectable
by DeviceClass CEL; which GPUs each NIC is aligned with."""

from __future__ import annotations

from typing import Any

import pytest

from gpuaas.model.network import LinkType, Nic
from gpuaas.supply.device_class import DeviceClass, DeviceClassError
from gpuaas.supply.devices import node_devices, resource_slices
from gpuaas.supply.loaders.errors import FleetFileError
from gpuaas.supply.loaders.inventory import inventory_from_document
from gpuaas.supply.nics import NIC_DRIVER, nic_affinity, nic_devices, nic_resources
from gpuaas.supply.partition import advertised_resources

DGX: dict[str, Any] = {
    "name": "dgx-{i:02}",
    "count": 4,
    "cpu": 224,
    "memory": "2Ti",
    "gpus": {"model": "H100", "count": 8, "numaNodes": 2, "pcieRoots": "pci-{g/2}"},
    "nics": [
        {"count": 4, "name": "mlx5_{k}", "pool": "nvidia.com/rdma_ib", "speed": 400, "vfs": 8,
         "pcieRoot": "pci-{k}", "numaNode": "{k/2}", "rail": "rail-{k}", "fabric": "ib-{i/2}"},
        {"name": "eth0", "pool": "openshift.io/mgmt", "link": "ethernet", "speed": 100},
    ],
}  # fmt: skip


def _fleet(*entries: dict[str, Any]) -> list:
    document = {"apiVersion": "gpuaas.io/v1", "kind": "Fleet", "nodes": list(entries)}
    return inventory_from_document(document, "fleet.yaml").nodes


def test_a_run_of_nics_expands_per_nic_and_per_node() -> None:
    nodes = _fleet(DGX)
    first, last = nodes[0], nodes[3]
    assert [n.name for n in first.nics] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3", "eth0"]
    assert first.nics[3] == Nic(
        "mlx5_3", "nvidia.com/rdma_ib", LinkType.INFINIBAND, 400, True, 8, "pci-3", 1,
        "rail-3", "ib-1",
    )  # fmt: skip
    assert last.nics[0].fabric == "ib-2"  # {i/2} counts runs of two nodes from start 1
    assert first.nics[4].rdma is False and first.nics[4].link is LinkType.ETHERNET
    assert [g.pcie_root for g in first.gpus] == [f"pci-{g // 2}" for g in range(8)]
    assert nic_resources(first) == {"nvidia.com/rdma_ib": 32, "openshift.io/mgmt": 1}
    assert advertised_resources(first)["nvidia.com/rdma_ib"] == 32


def test_affinity_names_the_gpus_under_each_nic() -> None:
    node = _fleet(DGX)[0]
    affinity = {a.nic: a for a in nic_affinity(node)}
    assert affinity["mlx5_1"].pcie == (2, 3)
    assert affinity["mlx5_1"].numa == (0, 1)  # NUMA node 0 holds GPUs 0-3; 2, 3 are PCIe
    assert affinity["eth0"].pcie == () and affinity["eth0"].numa == ()


@pytest.mark.parametrize(
    ("nics", "field", "problem"),
    [
        ([{"name": "mlx5_0"}], "nics[0].pool", "is required"),
        ([{"name": "mlx5_0", "pool": "mlnx_ib"}], "nics[0].pool", "domain/name"),
        ([{"name": "m", "pool": "nvidia.com/gpu"}], "nics[0].pool", "GPU resource"),
        ([{"name": "m", "pool": "a.io/b", "link": "fddi"}], "nics[0].link", "infiniband, roce"),
        ([{"name": "m", "pool": "a.io/b", "vfs": 0}], "nics[0].vfs", "positive integer"),
        ([{"name": "m", "pool": "a.io/b", "rdma": "yes"}], "nics[0].rdma", "true or false"),
        ([{"name": "m", "pool": "a.io/b", "pciAddress": "17:00"}], "nics[0].pciAddress", "PCI"),
        ([{"name": "m", "pool": "a.io/b", "speed": 400, "mtu": 9000}], "nics[0].mtu", "unknown"),
        ([{"name": "m", "pool": "a.io/b"}, {"name": "m", "pool": "a.io/b"}], "nics[1].name",
         "already NIC 0"),
        ([{"name": "a", "pool": "a.io/b"}, {"name": "b", "pool": "a.io/b", "link": "roce"}],
         "nics[1].link", "one pool is one link type"),
        ([{"count": 2, "name": "mlx5", "pool": "a.io/b"}], "nics[0].name", "needs {k}"),
        ([{"name": "mlx5_{k}", "pool": "a.io/b"}], "nics[0].name", "unknown placeholder"),
    ],
)  # fmt: skip
def test_bad_nics_are_refused_with_the_field_named(nics: list, field: str, problem: str) -> None:
    entry = {"name": "n1", "cpu": 8, "memory": "64Gi", "nics": nics}
    with pytest.raises(FleetFileError, match=problem) as caught:
        _fleet(entry)
    assert caught.value.field == field


def test_a_pool_is_declared_once_and_pcie_roots_match_the_gpus() -> None:
    nics = [{"name": "m", "pool": "a.io/b", "vfs": 4}]
    entry = {"name": "n1", "cpu": 8, "memory": "64Gi", "nics": nics, "resources": {"a.io/b": 4}}
    with pytest.raises(FleetFileError, match="comes from nics") as caught:
        _fleet(entry)
    assert caught.value.field == "resources.a.io/b"
    gpus = {"model": "H100", "count": 2, "pcieRoots": ["a"]}
    with pytest.raises(FleetFileError, match="1 PCIe roots for 2 GPUs"):
        _fleet({"name": "n2", "cpu": 8, "memory": "64Gi", "gpus": gpus})


def test_nics_publish_devices_beside_the_gpus() -> None:
    node = _fleet(DGX)[0]
    devices = nic_devices(node)
    assert [d.name for d in devices] == ["nic-mlx5-0", "nic-mlx5-1", "nic-mlx5-2", "nic-mlx5-3",
                                         "nic-eth0"]  # fmt: skip
    mlx = devices[1]
    assert mlx.driver == NIC_DRIVER and mlx.kind == "nic"
    assert mlx.attributes["resource.kubernetes.io/pcieRoot"] == "pci-1"
    assert (mlx.attributes["link"], mlx.attributes["speed"], mlx.attributes["rdma"]) == (
        "infiniband",
        400,
        True,
    )
    assert str(mlx.capacity["vfs"]) == "8"
    assert "rail" not in devices[4].attributes  # unknown values are left out
    slices = resource_slices(node)
    assert [s["spec"]["driver"] for s in slices] == ["gpu.nvidia.com", NIC_DRIVER]
    assert slices[1]["metadata"]["name"] == "dgx-01-nic.gpuaas.io"
    assert slices[1]["spec"]["devices"][1]["capacity"] == {"vfs": {"value": "8"}}
    gpu = slices[0]["spec"]["devices"][2]
    assert gpu["attributes"]["resource.kubernetes.io/pcieRoot"] == {"string": "pci-1"}


def test_device_classes_select_nics_as_they_select_gpus() -> None:
    devices = node_devices(_fleet(DGX)[0])
    nic = 'device.attributes["nic.gpuaas.io"]'
    ib = DeviceClass("rdma-ib", (f'{nic}.link == "infiniband" && {nic}.rdma',))
    assert [d.name for d in ib.select(devices)] == [f"nic-mlx5-{k}" for k in range(4)]
    rail = DeviceClass("rail-2", (f'{nic}.rail == "rail-2"',))
    assert [d.name for d in rail.select(devices)] == ["nic-mlx5-2"]
    vfs = DeviceClass("vfs", ('device.capacity["nic.gpuaas.io"].vfs.compareTo(quantity("4")) > 0',))
    assert len(vfs.select(devices)) == 4
    root = DeviceClass(
        "pci-1", ('device.attributes["resource.kubernetes.io"].pcieRoot == "pci-1"',)
    )
    assert [d.name for d in root.select(devices)] == ["gpu-2", "gpu-3", "nic-mlx5-1"]
    gpus = DeviceClass("gpus", ('device.attributes["gpu.nvidia.com"].type == "gpu"',))
    assert len(gpus.select(devices)) == 8  # a GPU selector never picks a NIC
    with pytest.raises(DeviceClassError, match=r"unknown attribute nic\.gpuaas\.io/mtu"):
        DeviceClass("bad", (f"{nic}.mtu > 1500",))
