"""One admitted job of every kind the manifests must express, as the reconciler hands it to a
backend (BackendJob with typed pods, the spec as submitted with its ``resolved`` requests)."""

from __future__ import annotations

from typing import Any

from gpuaas.backends.base import BackendJob
from gpuaas.model.dataset import CacheRuntime, Dataset
from gpuaas.model.network import LinkType, Nic
from gpuaas.model.node import Node
from gpuaas.model.placement import DeviceKind, DeviceRef, PodPlacement
from gpuaas.model.workload import DeviceClaim

GI = 1 << 30


def _gpu(node: int, gpu: int) -> DeviceRef:
    return DeviceRef(f"gpu-{gpu}", f"GPU-{node:04d}{gpu:04d}-0000-0000-0000", gpu, DeviceKind.GPU)


def _spec(pod_sets: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": extra.pop("name"),
        "kind": extra.pop("kind", "batch"),
        "queue": "research",
        "podSets": [{"name": ps["name"], "count": ps["count"]} for ps in pod_sets],
        **extra,
    }
    spec["resolved"] = {"queue": "acme/research", "podSets": pod_sets}
    return spec


def _pods(pod_set: str, nodes: list[str], per_node: int, devices, first_rank: int = 0):
    out = []
    index = 0
    for n, node in enumerate(nodes):
        for _ in range(per_node):
            out.append(
                PodPlacement(pod_set, index, first_rank + index, node, 8000, 64 * GI,
                             tuple(devices(n, index)))
            )  # fmt: skip
            index += 1
    return tuple(out)


def training_gang() -> BackendJob:
    """4 pods x 8 GPUs, one per host, a required rack: the usual distributed training job."""
    requests = {"cpu": 32000, "memory": 256 * GI, "nvidia.com/gpu": 8}
    spec = _spec(
        [{"name": "workers", "count": 4, "requests": requests,
          "topology": {"level": "rack", "mode": "required"}}],
        name="llama-pretrain", kind="training", priorityClass="high", maxRunTime=86400,
        container={"image": "nvcr.io/nvidia/pytorch:25.01-py3",
                   "command": ["torchrun"], "args": ["--nnodes=4", "train.py"],
                   "env": {"NCCL_DEBUG": "INFO"}},
    )  # fmt: skip
    nodes = [f"h100-{i:03d}" for i in range(1, 5)]
    pods = _pods("workers", nodes, 1, lambda n, i: [_gpu(n, g) for g in range(8)])
    return BackendJob(101, "llama-pretrain", spec, pods, attempt=1, tenant="acme")


def multi_pod_set() -> BackendJob:
    """A launcher on a CPU node and 2 GPU workers on one host (two pods per node)."""
    spec = _spec(
        [{"name": "launcher", "count": 1, "requests": {"cpu": 2000, "memory": 4 * GI}},
         {"name": "workers", "count": 2, "requests": {"cpu": 8000, "memory": 64 * GI,
                                                      "nvidia.com/gpu": 4},
          "topology": {"level": "nvlink", "mode": "preferred"}}],
        name="mpi-allreduce", kind="mpi",
        container={"image": "ghcr.io/example/mpi:1.0", "command": ["mpirun", "./allreduce"]},
    )  # fmt: skip
    launcher = _pods("launcher", ["cpu-001"], 1, lambda n, i: [])

    def four(n: int, i: int) -> list[DeviceRef]:
        return [_gpu(7, g) for g in range(4 * i, 4 * i + 4)]

    workers = _pods("workers", ["h100-007"], 2, four, first_rank=1)
    return BackendJob(102, "mpi-allreduce", spec, launcher + workers, attempt=0, tenant="acme")


def fractional() -> BackendJob:
    """Half a GPU (gpuaas.io/gpu-milli 500) for a notebook."""
    spec = _spec(
        [{"name": "main", "count": 1,
          "requests": {"cpu": 2000, "memory": 16 * GI, "gpuaas.io/gpu-milli": 500}}],
        name="notebook", kind="notebook", priorityClass="low",
        container={"image": "quay.io/jupyter/pytorch-notebook:latest"},
    )  # fmt: skip
    share = DeviceRef("gpu-2", "GPU-00030002-0000-0000-0000", 2, DeviceKind.SHARE, 500)
    pods = _pods("main", ["l40s-003"], 1, lambda n, i: [share])
    return BackendJob(103, "notebook", spec, pods, attempt=0, tenant="acme")


def mig() -> BackendJob:
    """Two pods on one host, each with a MIG 1g.10gb instance."""
    spec = _spec(
        [{"name": "main", "count": 2,
          "requests": {"cpu": 1000, "memory": 8 * GI, "nvidia.com/mig-1g.10gb": 1}}],
        name="mig-eval", command=["python", "-m", "eval"],
    )  # fmt: skip

    def instance(n: int, i: int) -> list[DeviceRef]:
        return [DeviceRef(f"gpu-0-mig-1g10gb-{i}", f"MIG-a100-0002-{i}", 0, DeviceKind.MIG, 0)]

    pods = _pods("main", ["a100-002"], 2, instance)
    return BackendJob(104, "mig-eval", spec, pods, attempt=2, tenant="acme")


#: DRA claims for the ``dra`` job (the job API carries none yet; the engine's model does).
DRA_CLAIMS = {
    "main": (
        DeviceClaim("gpus", "gpu.nvidia.com", 2,
                    ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"',),
                    ("gpu.nvidia.com/nvlinkDomain",)),
    )
}  # fmt: skip


def dra() -> BackendJob:
    """One pod whose GPUs come from a DRA claim (DeviceClass + CEL selector + matchAttribute)."""
    spec = _spec(
        [{"name": "main", "count": 1, "requests": {"cpu": 4000, "memory": 32 * GI}}],
        name="dra-train", kind="training",
        container={"image": "nvcr.io/nvidia/pytorch:25.01-py3", "command": ["python", "t.py"]},
    )  # fmt: skip
    pods = _pods("main", ["h100-002"], 1, lambda n, i: [_gpu(2, 0), _gpu(2, 1)])
    return BackendJob(105, "dra-train", spec, pods, attempt=0, tenant="acme")


def non_containerized() -> BackendJob:
    """A shell script, no image: it runs in the configured base image."""
    spec = _spec(
        [{"name": "main", "count": 1, "requests": {"cpu": 500, "memory": GI, "nvidia.com/gpu": 1}}],
        name="nvidia-smi", script="nvidia-smi\necho done", maxRunTime=600.5,
    )  # fmt: skip
    pods = _pods("main", ["l4-001"], 1, lambda n, i: [_gpu(1, 3)])
    return BackendJob(106, "nvidia-smi", spec, pods, attempt=0, tenant="acme")


def inference() -> BackendJob:
    """Three inference replicas on three hosts, one GPU each, on time-sliced replicas."""
    spec = _spec(
        [{"name": "server", "count": 3,
          "requests": {"cpu": 4000, "memory": 32 * GI, "nvidia.com/gpu.shared": 1}}],
        name="vllm", kind="inference",
        container={"image": "vllm/vllm-openai:v0.9.0", "args": ["--model", "meta-llama/3-8b"]},
    )  # fmt: skip
    pods = _pods("server", ["l40s-001", "l40s-002", "l40s-003"], 1, lambda n, i: [
        DeviceRef("gpu-0-ts-1", f"GPU-l40s-{n}", 0, DeviceKind.REPLICA, 0)])  # fmt: skip
    return BackendJob(107, "vllm", spec, pods, attempt=0, tenant="acme")


def _nic(nic: int, vf: int) -> DeviceRef:
    return DeviceRef(f"mlx5_{nic}-vf-{vf}", f"0000:{0x17 + nic:02x}:00.{vf + 1}", -1,
                     DeviceKind.NIC, 0)  # fmt: skip


def rdma_gang() -> BackendJob:
    """4 pods x 8 GPUs with one InfiniBand VF per GPU, aligned (nvidia.com/rdma_ib), joining
    the tenant's default attachment: the RDMA training gang."""
    requests = {"cpu": 96000, "memory": 1024 * GI, "nvidia.com/gpu": 8}
    spec = _spec(
        [{"name": "workers", "count": 4, "requests": requests,
          "topology": {"level": "rack", "mode": "required"}}],
        name="llama-70b-ib", kind="training", priorityClass="high",
        container={"image": "nvcr.io/nvidia/pytorch:25.01-py3",
                   "command": ["torchrun"], "args": ["--nnodes=4", "--nproc-per-node=8", "t.py"],
                   "env": {"NCCL_IB_DISABLE": "0"}},
    )  # fmt: skip
    spec["podSets"][0]["network"] = {"pool": "nvidia.com/rdma_ib", "perGpu": True,
                                     "alignment": "required"}  # fmt: skip
    nodes = [f"dgx-h100-{i:02d}" for i in range(1, 5)]

    def devices(n: int, i: int) -> list[DeviceRef]:
        return [_gpu(n, g) for g in range(8)] + [_nic(g, 0) for g in range(8)]

    pods = _pods("workers", nodes, 1, devices)
    return BackendJob(108, "llama-70b-ib", spec, pods, attempt=0, tenant="acme")


def rdma_multi() -> BackendJob:
    """A launcher and 2 RoCE workers with 2 VFs each of a pool gpuaas chose (no pool named:
    taken from the placement), on the tenant's own NetworkAttachmentDefinition."""
    spec = _spec(
        [{"name": "launcher", "count": 1, "requests": {"cpu": 2000, "memory": 4 * GI}},
         {"name": "workers", "count": 2, "requests": {"cpu": 32000, "memory": 256 * GI,
                                                      "gpuaas.io/gpu-milli": 4000}}],
        name="mpi-roce", kind="mpi",
        container={"image": "ghcr.io/example/mpi:1.0", "command": ["mpirun", "./allreduce"]},
    )  # fmt: skip
    spec["podSets"][1]["network"] = {"count": 2, "attachment": "acme-net/roce-a"}
    launcher = _pods("launcher", ["cpu-001"], 1, lambda n, i: [])
    workers = _pods("workers", ["hgx-h200-07", "hgx-h200-08"], 1,
                    lambda n, i: [_gpu(n, g) for g in range(4)] + [_nic(0, 2 * i), _nic(0, 1)],
                    first_rank=1)  # fmt: skip
    return BackendJob(109, "mpi-roce", spec, launcher + workers, attempt=0, tenant="acme")


#: The fleet's nodes the ``rdma-multi`` pods were placed on (for the pool of their NICs).
RDMA_NODES = {
    name: Node(name, 192000, 2 * 1024 * GI,
               nics=[Nic("mlx5_0", "openshift.io/mlnx_roce", LinkType.ROCE, 200, vfs=8)])
    for name in ("hgx-h200-07", "hgx-h200-08")
}  # fmt: skip


def dataset() -> BackendJob:
    """A fine-tuning job reading the registered dataset ``imagenet-1k`` (Fluid PVC)."""
    spec = _spec(
        [{"name": "main", "count": 1,
          "requests": {"cpu": 16000, "memory": 128 * GI, "nvidia.com/gpu": 2}}],
        name="resnet-ft", kind="training",
        container={"image": "nvcr.io/nvidia/pytorch:25.01-py3", "command": ["python", "ft.py"]},
        dataset={"name": "imagenet-1k", "locality": "preferred"},
    )  # fmt: skip
    pods = _pods("main", ["h100-003"], 1, lambda n, i: [_gpu(3, 0), _gpu(3, 1)])
    return BackendJob(110, "resnet-ft", spec, pods, attempt=0, tenant="acme")


DATASETS = {
    "imagenet-1k": Dataset("imagenet-1k", "acme", "s3://acme-data/imagenet/", 150 * GI,
                           CacheRuntime.ALLUXIO, 200 * GI)
}  # fmt: skip


KINDS = {
    "rdma-gang": rdma_gang,
    "rdma-multi": rdma_multi,
    "dataset": dataset,
    "training-gang": training_gang,
    "multi-pod-set": multi_pod_set,
    "fractional": fractional,
    "mig": mig,
    "dra": dra,
    "non-containerized": non_containerized,
    "inference": inference,
}
