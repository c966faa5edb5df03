"""Nodes with NICs through the fleet API (SQLite and PostgreSQL): a group's run of NICs and its
node patterns are stored expanded, one self-contained entry per node; the node view shows the
NICs with the GPUs each is aligned with; a bad NIC is refused naming the field, nothing stored."""

from __future__ import annotations

from typing import Any

from conftest import Api

DGX: dict[str, Any] = {
    "name": "dgx-{i:02}",
    "count": 2,
    "cpu": "224",
    "memory": "2Ti",
    "gpus": {"model": "H100-80GB", "count": 8, "numaNodes": 2, "pcieRoots": "pci-{g}"},
    "labels": {"gpuaas.io/pool": "ib"},
    "nics": [
        {"count": 8, "name": "mlx5_{k}", "pool": "nvidia.com/rdma_ib", "speed": 400, "vfs": 4,
         "pcieRoot": "pci-{k}", "numaNode": "{k/4}", "rail": "rail-{k}", "fabric": "ib-{i}",
         "pciAddress": "0000:{k}{i}:00.0"},
    ],
}  # fmt: skip


def test_nics_are_stored_expanded_and_shown_with_their_gpus(api: Api) -> None:
    made = api.post("/v1/nodes", json=DGX)
    assert made.status_code == 201, made.text
    second = made.json()[1]
    stored = second["spec"]["nics"]
    assert len(stored) == 8 and stored[3]["fabric"] == "ib-2" and stored[3]["name"] == "mlx5_3"
    assert stored[3]["pciAddress"] == "0000:32:00.0" and "count" not in stored[3]
    assert second["spec"]["gpus"]["pcieRoots"][5] == "pci-5"
    one = api.get("/v1/nodes/dgx-01").json()
    nic = one["nics"][5]
    assert (nic["pool"], nic["link"], nic["speedGbps"], nic["vfs"]) == (
        "nvidia.com/rdma_ib", "infiniband", 400, 4
    )  # fmt: skip
    assert nic["pcieGpus"] == [5] and nic["numaGpus"] == [4, 6, 7]
    assert one["gpus"][5]["pcieRoot"] == "pci-5"
    assert one["allocatable"]["nvidia.com/rdma_ib"] == "32"


def test_a_bad_nic_is_refused_naming_the_field(api: Api) -> None:
    bad = {**DGX, "nics": [{"name": "mlx5_0", "pool": "rdma_ib"}]}
    r = api.post("/v1/nodes", json=bad)
    assert r.status_code == 422 and r.json()["errors"][0]["field"] == "nics[0].pool", r.text
    assert api.get("/v1/nodes").json()["items"] == []
