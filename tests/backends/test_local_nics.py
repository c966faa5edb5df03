"""The local backend passes a pod's RDMA NICs in its environment: ``NCCL_IB_HCA`` (each NIC
once) and ``GPUAAS_NICS`` (the VFs); a pod without NICs gets neither."""

from __future__ import annotations

import time
from pathlib import Path

from gpuaas.backends.base import BackendJob, EventKind, nic_variables
from gpuaas.backends.local import LocalBackend, procs
from gpuaas.backends.local.state import saved_runs
from gpuaas.backends.logs import LogLayout
from gpuaas.model.placement import DeviceKind, DeviceRef, PodPlacement

PRINT = ["bash", "-c", 'echo "hca=${NCCL_IB_HCA-unset} nics=${GPUAAS_NICS-unset} '
         'cvd=$CUDA_VISIBLE_DEVICES"']  # fmt: skip


def placed(rank: int, nics: tuple[str, ...]) -> PodPlacement:
    gpu = DeviceRef("gpu-0", f"GPU-{rank}", 0, DeviceKind.GPU)
    refs = tuple(DeviceRef(n, f"0000:1{rank}:00.0", -1, DeviceKind.NIC, 0) for n in nics)
    return PodPlacement("main", rank, rank, f"node-{rank}", 1000, 1 << 28, (gpu, *refs))


def test_nic_variables_name_each_nic_once_and_every_vf() -> None:
    pod = placed(0, ("mlx5_0-vf-1", "mlx5_0-vf-2", "mlx5_3"))
    assert nic_variables(pod) == {
        "NCCL_IB_HCA": "mlx5_0,mlx5_3",
        "GPUAAS_NICS": "mlx5_0-vf-1,mlx5_0-vf-2,mlx5_3",
    }
    assert nic_variables(placed(1, ())) == {}
    assert pod.visible_devices == "GPU-0"  # NICs are not CUDA devices


def test_a_pod_sees_its_nics_in_its_environment(tmp_path: Path) -> None:
    layout = LogLayout(tmp_path / "logs")
    backend = LocalBackend(tmp_path / "state", layout, stop_grace=1.0)
    pods = (placed(0, ("mlx5_1-vf-0", "mlx5_2-vf-0")), placed(1, ()))
    try:
        backend.launch(BackendJob(5, "rdma", {"command": PRINT}, pods))
        kinds: list[EventKind] = []
        deadline = time.monotonic() + 15
        while EventKind.SUCCEEDED not in kinds and time.monotonic() < deadline:
            kinds += [e.kind for e in backend.poll(time.time())]
            time.sleep(0.05)
        assert EventKind.SUCCEEDED in kinds, kinds
        first = layout.stdout(5, 0, 0).read_text().strip()
        second = layout.stdout(5, 0, 1).read_text().strip()
        assert first == "hca=mlx5_1,mlx5_2 nics=mlx5_1-vf-0,mlx5_2-vf-0 cvd=GPU-0"
        assert second == "hca=unset nics=unset cvd=GPU-1"
    finally:
        for record in saved_runs(tmp_path / "state"):
            for p in record.pods:
                if p.pid is not None and p.start is not None:
                    procs.signal_group(p.pid, p.start, 9)
