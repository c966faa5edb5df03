"""RDMA NICs on the real Slurm cluster (see conftest.py; its nodes define a count-only ``nic``
gres): the pods learn their NICs from the environment, and the allocation asks the gres the
job's NIC pool maps to, where the cluster defines it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from slurm_cluster import Cluster
from slurm_world import backend

from gpuaas.backends.base import BackendJob, EventKind
from gpuaas.backends.logs import LogLayout
from gpuaas.backends.slurm import SlurmBackend
from gpuaas.backends.slurm.inventory import other_gres
from gpuaas.backends.slurm.script import (
    SlurmNode,
    Unrunnable,
    parse_nic_gres,
    submission,
)
from gpuaas.model.placement import DeviceKind, DeviceRef, PodPlacement

POOL = "openshift.io/mlnx_ib"
PRINT = ["bash", "-c", "echo hca=$NCCL_IB_HCA nics=$GPUAAS_NICS cvd=$CUDA_VISIBLE_DEVICES"]


def rdma_pod(node: str, rank: int = 0) -> PodPlacement:
    gpus = tuple(DeviceRef(f"gpu-{i}", f"GPU-{node}-{i}", i, DeviceKind.GPU) for i in (2, 3))
    nics = (
        DeviceRef("mlx5_1-vf-0", "0000:11:00.0", -1, DeviceKind.NIC, 0),
        DeviceRef("mlx5_1-vf-1", "0000:11:00.0", -1, DeviceKind.NIC, 0),
    )
    return PodPlacement("main", rank, rank, node, 1000, 1 << 28, gpus + nics)


def spec(pool: str) -> dict[str, object]:
    return {"command": PRINT, "podSets": [{"name": "main", "network": {"pool": pool, "count": 2}}]}


def until(slurm: SlurmBackend, kind: EventKind, timeout: float = 30.0) -> None:
    seen: list[EventKind] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += [e.kind for e in slurm.poll(time.time())]
        if kind in seen:
            return
        time.sleep(0.2)
    raise AssertionError(f"saw only {seen}")


def test_nics_are_asked_as_the_clusters_gres_and_reach_the_pod(
    slurm_cluster: Cluster, tmp_path: Path
) -> None:
    slurm = backend(slurm_cluster, tmp_path, nic_gres={POOL: "nic"})
    slurm.launch(BackendJob(31, "rdma", spec(POOL), (rdma_pod("n2"),)))
    until(slurm, EventKind.STARTED)
    slurm_id = slurm.slurm_id(31)
    assert slurm_id is not None
    shown = slurm_cluster.scontrol("show", "job", "-d", str(slurm_id))
    assert "nic:2" in shown, shown  # Slurm counted the NICs
    until(slurm, EventKind.SUCCEEDED)
    out = (tmp_path / "logs").glob("**/pod-0.out")
    words = dict(w.split("=", 1) for w in next(iter(out)).read_text().split())
    assert words == {"hca": "mlx5_1", "nics": "mlx5_1-vf-0,mlx5_1-vf-1", "cvd": "2,3"}


def test_a_pool_the_cluster_has_no_gres_for_runs_without_asking_slurm(
    slurm_cluster: Cluster, tmp_path: Path
) -> None:
    slurm = backend(slurm_cluster, tmp_path, nic_gres={"nvidia.com/other": "nic"})
    slurm.launch(BackendJob(32, "rdma", spec(POOL), (rdma_pod("n3"),)))
    until(slurm, EventKind.STARTED)
    slurm_id = slurm.slurm_id(32)
    assert slurm_id is not None
    assert "nic:" not in slurm_cluster.scontrol("show", "job", "-d", str(slurm_id))
    until(slurm, EventKind.SUCCEEDED)
    out = next(iter((tmp_path / "logs").glob("**/pod-0.out"))).read_text()
    assert "hca=mlx5_1 " in out


# ----------------------------------------------------------------------------- no Slurm needed
def test_submission_asks_the_nic_gres_only_where_every_node_defines_it(tmp_path: Path) -> None:
    nodes = {
        n: SlurmNode(n, n, ("gpu",), "h100", 8, gres=(("nic", 4),) if n != "n3" else ())
        for n in ("n1", "n2", "n3")
    }
    job = BackendJob(1, "x", spec(POOL), (rdma_pod("n1", 0), rdma_pod("n2", 1)))
    layout = LogLayout(tmp_path)
    sub = submission(job, layout, nodes, nic_gres={POOL: "nic"})
    assert "--gres=gpu:h100:2,nic:2" in sub.options
    assert "NCCL_IB_HCA=mlx5_1 GPUAAS_NICS=mlx5_1-vf-0,mlx5_1-vf-1 ;;" in sub.task
    unmapped = submission(job, layout, nodes)
    assert "--gres=gpu:h100:2" in unmapped.options
    partly = BackendJob(2, "x", spec(POOL), (rdma_pod("n1", 0), rdma_pod("n3", 1)))
    assert "--gres=gpu:h100:2" in submission(partly, layout, nodes, nic_gres={POOL: "nic"}).options


def test_uneven_nics_per_node_cannot_be_one_allocation(tmp_path: Path) -> None:
    nodes = {n: SlurmNode(n, n, ("gpu",), "h100", 8) for n in ("n1", "n2")}
    plain = rdma_pod("n2", 1)
    plain = PodPlacement("main", 1, 1, "n2", 1000, 1 << 28, plain.gpu_devices)
    job = BackendJob(3, "x", spec(POOL), (rdma_pod("n1", 0), plain))
    with pytest.raises(Unrunnable, match="NIC"):
        submission(job, LogLayout(tmp_path), nodes)


def test_other_gres_and_the_setting_parse() -> None:
    assert other_gres("gpu:h100:8(S:0-1),nic:4,nic:ib:2(S:0),shard:0") == (("nic", 6),)
    assert other_gres("(null)") == ()
    assert parse_nic_gres("openshift.io/mlnx_ib=nic, nvidia.com/rdma=rdma") == {
        "openshift.io/mlnx_ib": "nic",
        "nvidia.com/rdma": "rdma",
    }
    with pytest.raises(ValueError, match="pool=gres"):
        parse_nic_gres("nic")
