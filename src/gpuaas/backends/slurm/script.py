"""A gpuaas job as a Slurm batch job: the ``sbatch`` options and the two scripts.

The placement is gpuaas's, so the batch job asks Slurm for exactly that: ``--nodelist`` (the
pods' nodes) with ``--nodes`` their number, per node ``--ntasks-per-node`` (the pods there),
``--cpus-per-task`` and ``--mem`` from the pods' CPU and memory, and the typed
``--gres=gpu:<type>:<n>`` of the node's GPUs. A gang is one allocation: the batch script runs
``srun`` once, one task per pod, and each task finds its pod (rank, GPUs, log files) by its
node and local task id in ``task.sh``. Slurm gives one shape per node in a job, so pods spread
unevenly (two on one node, one on the other) cannot run as one allocation and are refused.

Slurm 22.05 cannot be told *which* GPU indexes to give: it takes the lowest free ones. The
task therefore sets ``CUDA_VISIBLE_DEVICES`` to the indexes gpuaas assigned (which never
overlap between gpuaas's jobs) and records Slurm's own choice in ``GPUAAS_SLURM_GPUS``, with a
line on the pod's stderr when they differ. That holds where Slurm does not confine devices by
cgroup (``ConstrainDevices=no``); see ``docs/backends.md``.

A pod given RDMA NICs gets ``NCCL_IB_HCA`` and ``GPUAAS_NICS`` in ``task.sh`` (as on the
local backend). Where the cluster defines a gres for the NICs' pool (the backend's ``nic_gres``
maps a pool to a gres name, ``GPUAAS_SLURM_NIC_GRES=openshift.io/mlnx_ib=nic``, and every
node of the job lists that gres), the allocation also asks for it: ``--gres=gpu:h100:4,nic:2``
(per node: the NICs of its pods). Without such a gres Slurm does not count NICs; gpuaas's
choice (which never gives a VF twice) still reaches the pods through the environment.

Files (all under the job's attempt folder of :class:`~gpuaas.backends.logs.LogLayout`, which
must be on a file system the Slurm nodes share): ``slurm-batch.sh``, ``task.sh``, the user's
``script.sh`` when the job gives a script, ``slurm-<id>.out`` (Slurm's own output of the
batch step) and each pod's ``pod-<rank>.out`` / ``.err``.

Volumes (``resolved.volumes``, docs/storage.md): a volume's directory is on the data dir the
nodes share (``local``) or where the nodes mount the provider's export (``nfs``); each task
exports ``GPUAAS_VOLUME_<NAME>`` (that directory) and links it at the mount path made relative
to the job's working directory (``/data`` -> ``./data``), as the local backend does. A volume
with no directory (a Kubernetes claim) cannot be mounted here and the job is refused.

A dataset (``resolved.dataset``, docs/datasets.md): the batch script first runs one task per node
that fills the node's dataset cache (:mod:`.datasets`), and stops the job when it cannot; each
pod gets ``GPUAAS_DATASET`` and ``GPUAAS_DATASET_DIR`` (the copy on its node).
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpuaas.backends.base import BackendJob, nic_variables
from gpuaas.backends.dataset_cache import CacheError
from gpuaas.backends.logs import LogLayout
from gpuaas.model.placement import DeviceKind, PodPlacement
from gpuaas.model.volume import mount_link, volume_env_name

if TYPE_CHECKING:
    from gpuaas.backends.slurm.datasets import SlurmNodeCaches

_MIB = 1 << 20
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Unrunnable(Exception):
    """This job cannot run on Slurm as placed; the message says why (it becomes the
    job's rejection reason)."""


@dataclass(frozen=True, slots=True)
class SlurmNode:
    """What the backend needs to know of a Slurm node (from Slurm's node listing)."""

    name: str
    address: str
    partitions: tuple[str, ...]
    gres_type: str | None = None  # Slurm's raw GPU type (``h100``, ``nvidia_h100_80gb_hbm3``)
    gpus: int = 0
    #: the node's other gres by name and count (``nic:4`` -> ``(("nic", 4),)``)
    gres: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Submission:
    name: str
    options: list[str]
    batch: str
    task: str
    files: dict[str, str] = field(default_factory=dict)  # file name -> content


def job_name(prefix: str, job_id: int, attempt: int) -> str:
    return f"{prefix}-{job_id}-{attempt}"


def submission(
    job: BackendJob,
    layout: LogLayout,
    nodes: Mapping[str, SlurmNode],
    partition: str | None = None,
    prefix: str = "gpuaas",
    nic_gres: Mapping[str, str] | None = None,
    datasets: SlurmNodeCaches | None = None,
) -> Submission:
    """The batch job for ``job``; :class:`Unrunnable` when Slurm cannot run it as placed.
    ``nic_gres``: NIC pool -> the cluster's gres name for it (see the module docstring);
    ``datasets``: the nodes' dataset caches, for a job that reads a dataset."""
    if not job.pods:
        raise Unrunnable("the job has no pods placed")
    if job.spec.get("container") is not None:
        raise Unrunnable("the slurm backend runs commands and scripts, not containers")
    by_node: dict[str, list[PodPlacement]] = {}
    for pod in sorted(job.pods, key=lambda p: p.rank):
        for device in pod.gpu_devices:
            if device.kind is not DeviceKind.GPU:
                raise Unrunnable(
                    f"pod {pod.rank} was given {device.name} ({device.kind.value}); Slurm gres "
                    "here offers whole GPUs only"
                )
        by_node.setdefault(pod.node, []).append(pod)
    unknown = [n for n in by_node if n not in nodes]
    if unknown:
        raise Unrunnable(f"node(s) {', '.join(unknown)} are not nodes of this Slurm cluster")
    shapes = {n: (len(pods), _gpus(pods), _nics(pods)) for n, pods in by_node.items()}
    if len(set(shapes.values())) > 1:
        spread = ", ".join(
            f"{n}: {p} pod(s)/{g} GPU(s)" + (f"/{k} NIC(s)" if k else "")
            for n, (p, g, k) in shapes.items()
        )
        raise Unrunnable(
            f"pods are spread unevenly over nodes ({spread}); one Slurm allocation has one "
            "shape per node"
        )
    tasks, gpus, nics = next(iter(shapes.values()))
    types = {nodes[n].gres_type for n in by_node}
    if gpus and len(types) > 1:
        raise Unrunnable(f"the job's nodes have different GPU types ({sorted(map(str, types))})")
    chosen = _partition(list(by_node), nodes, partition)
    cpus = max(1, max(math.ceil(p.cpu_milli / 1000) for p in job.pods))
    memory = max(1, max(math.ceil(sum(p.memory_bytes for p in pods) / _MIB)
                        for pods in by_node.values()))  # fmt: skip
    folder = layout.attempt_dir(job.id, job.attempt)
    name = job_name(prefix, job.id, job.attempt)
    options = [
        f"--job-name={name}",
        f"--comment={prefix} job {job.id} attempt {job.attempt}"
        + (f" tenant {job.tenant}" if job.tenant else ""),
        f"--partition={chosen}",
        f"--nodelist={','.join(by_node)}",
        f"--nodes={len(by_node)}",
        f"--ntasks-per-node={tasks}",
        f"--cpus-per-task={cpus}",
        f"--mem={memory}",
        f"--chdir={folder}",
        f"--output={folder}/slurm-%j.out",
        f"--error={folder}/slurm-%j.out",
        "--export=NONE",
        "--no-requeue",
    ]
    gres: list[str] = []
    if gpus:
        gres_type = types.pop()
        gres.append(f"gpu:{gres_type}:{gpus}" if gres_type else f"gpu:{gpus}")
    nic = _nic_gres(job, list(by_node), nodes, nic_gres or {}) if nics else None
    if nic is not None:
        gres.append(f"{nic}:{nics}")
    if gres:
        options.append("--gres=" + ",".join(gres))
    limit = job.spec.get("maxRunTime")
    if limit is not None:
        options.append(f"--time={max(1, math.ceil(float(limit) / 60))}")
    files: dict[str, str] = {}
    if job.spec.get("script"):
        files["script.sh"] = str(job.spec["script"])
        run = f"exec bash {shlex.quote(str(folder / 'script.sh'))}"
    else:
        command = [str(c) for c in job.spec.get("command") or []]
        if not command:
            raise Unrunnable("the job gives neither a command nor a script")
        run = "exec " + shlex.join(command)
    fill, reads = _dataset_lines(job, folder, datasets)
    task = _task_script(job, layout, by_node, nodes, run, reads)
    batch = "\n".join([
        "#!/bin/bash",
        f"# gpuaas job {job.id} attempt {job.attempt}: one Slurm task per pod (see task.sh)",
        f"export PATH={_PATH}",
        *fill,
        f"exec srun --export=ALL --kill-on-bad-exit=1 --ntasks-per-node={tasks} "
        f"--cpus-per-task={cpus} bash {shlex.quote(str(folder / 'task.sh'))}",
        "",
    ])  # fmt: skip
    return Submission(name, options, batch, task, files)


def _gpus(pods: list[PodPlacement]) -> int:
    return len({d.gpu for pod in pods for d in pod.gpu_devices})


def _nics(pods: list[PodPlacement]) -> int:
    return sum(len(pod.nics) for pod in pods)


def _nic_gres(
    job: BackendJob, names: list[str], nodes: Mapping[str, SlurmNode], nic_gres: Mapping[str, str]
) -> str | None:
    """The gres name the job's NICs are asked as: the one the job's pool maps to, when every
    node defines it; None when the cluster counts no gres for them."""
    pools = {
        str((ps.get("network") or {}).get("pool") or "")
        for ps in job.spec.get("podSets") or ()
        if isinstance(ps, Mapping) and ps.get("network")
    }
    mapped = {nic_gres[p] for p in pools if p in nic_gres}
    if len(mapped) != 1:
        if len(mapped) > 1:
            raise Unrunnable(f"the job's NIC pools map to several gres ({sorted(mapped)})")
        return None
    name = mapped.pop()
    if all(name in dict(nodes[n].gres) for n in names):
        return name
    return None


def parse_nic_gres(text: str | None) -> dict[str, str]:
    """``pool=gres,pool2=gres2`` (the ``GPUAAS_SLURM_NIC_GRES`` setting) as a mapping."""
    out: dict[str, str] = {}
    for item in (text or "").split(","):
        if item.strip():
            pool, sep, gres = item.strip().rpartition("=")
            if not sep or not pool or not gres:
                raise ValueError(f"expected pool=gres, got {item.strip()!r}")
            out[pool] = gres
    return out


def _partition(names: list[str], nodes: Mapping[str, SlurmNode], wanted: str | None) -> str:
    """``wanted`` if every node is in it; else the first of the first node's partitions
    that holds every node."""
    common = [p for p in nodes[names[0]].partitions if all(p in nodes[n].partitions for n in names)]
    if wanted is not None:
        if wanted not in common:
            raise Unrunnable(f"partition {wanted!r} does not hold node(s) {', '.join(names)}")
        return wanted
    if not common:
        raise Unrunnable(f"no Slurm partition holds all of {', '.join(names)}")
    return common[0]


def _task_script(
    job: BackendJob,
    layout: LogLayout,
    by_node: Mapping[str, list[PodPlacement]],
    nodes: Mapping[str, SlurmNode],
    run: str,
    reads: list[str] | None = None,
) -> str:
    q = shlex.quote
    world = len(job.pods)
    master = next(p for p in job.pods if p.rank == 0).node if world else ""
    lines = [
        "#!/bin/bash",
        f"# one pod of gpuaas job {job.id} attempt {job.attempt} per Slurm task: its rank, "
        "GPUs and log files by node and local task id",
        'case "${SLURMD_NODENAME}:${SLURM_LOCALID}" in',
    ]
    for node, pods in by_node.items():
        for local, pod in enumerate(pods):
            gpus = ",".join(str(i) for i in pod.gpu_indexes)
            out = layout.stdout(job.id, job.attempt, pod.rank)
            err = layout.stderr(job.id, job.attempt, pod.rank)
            nic_env = "".join(f" {k}={q(v)}" for k, v in nic_variables(pod).items())
            lines.append(
                f"  {q(f'{node}:{local}')}) RANK={pod.rank} GPUS={q(gpus)} "
                f"UUIDS={q(pod.visible_devices)} OUT={q(str(out))} ERR={q(str(err))}{nic_env} ;;"
            )
    lines += [
        f'  *) echo "gpuaas: job {job.id} has no pod for $SLURMD_NODENAME task $SLURM_LOCALID"'
        " >&2; exit 97 ;;",
        "esac",
        'exec >"$OUT" 2>"$ERR"',
        'export GPUAAS_SLURM_GPUS="${CUDA_VISIBLE_DEVICES-}"',
        f'export GPUAAS_JOB_ID={job.id} GPUAAS_ATTEMPT={job.attempt} GPUAAS_GPU_UUIDS="$UUIDS"',
        f'export RANK LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE={world}',
        'if [ -n "${GPUAAS_NICS-}" ]; then export NCCL_IB_HCA GPUAAS_NICS; fi',
        f"export MASTER_ADDR={q(nodes[master].address if master in nodes else master)} "
        f"MASTER_PORT={20000 + (job.id * 7 + job.attempt) % 10000}",
        'export CUDA_VISIBLE_DEVICES="$GPUS" NVIDIA_VISIBLE_DEVICES="$GPUS"',
        'if [ -n "$GPUS" ] && [ "$GPUAAS_SLURM_GPUS" != "$GPUS" ]; then',
        '  echo "gpuaas: Slurm allocated GPUs $GPUAAS_SLURM_GPUS on $SLURMD_NODENAME,'
        " gpuaas assigned $GPUS: using gpuaas's\" >&2",
        "fi",
    ]
    for key, value in sorted(_env(job).items()):
        lines.append(f"export {key}={q(value)}")
    lines.append(f"cd {q(str(layout.attempt_dir(job.id, job.attempt)))}")
    lines += _volume_lines(job)
    lines += reads or []
    lines += [run, ""]
    return "\n".join(lines)


def _dataset_lines(
    job: BackendJob, folder: Path, datasets: SlurmNodeCaches | None
) -> tuple[list[str], list[str]]:
    """For a job that reads a dataset: the batch step that fills its nodes' caches, and the
    pods' environment (``GPUAAS_DATASET``, ``GPUAAS_DATASET_DIR``: the copy on its node)."""
    dataset = (job.spec.get("resolved") or {}).get("dataset")
    if not dataset:
        return [], []
    if datasets is None:
        raise Unrunnable(f"dataset {dataset['name']}: this backend keeps no dataset caches")
    try:
        fill = datasets.fill_lines(job.tenant or "", dataset, folder)
    except CacheError as exc:
        raise Unrunnable(f"dataset {dataset['name']}: {exc}") from None
    return fill, datasets.task_lines(job.tenant or "", dataset)


def _volume_lines(job: BackendJob) -> list[str]:
    """Export and link each volume (the tasks of a job share its folder: the first links)."""
    q = shlex.quote
    out = []
    for mount in (job.spec.get("resolved") or {}).get("volumes") or ():
        path = str(mount.get("path") or "")
        if not path:
            raise Unrunnable(
                f"volume {mount['name']} has no directory the Slurm nodes can mount "
                f"(claim {mount.get('claim')})"
            )
        link = mount_link(str(mount["mountPath"]))
        out.append(f"export {volume_env_name(str(mount['name']))}={q(path)}")
        parent = str(Path(link).parent)
        if parent != ".":
            out.append(f"mkdir -p {q(parent)}")
        out.append(f"[ -L {q(link)} ] || ln -sn {q(path)} {q(link)} 2>/dev/null || true")
    return out


def _env(job: BackendJob) -> dict[str, str]:
    env = job.spec.get("env") or {}
    return {str(k): str(v) for k, v in env.items()} if isinstance(env, Mapping) else {}


def write_files(folder: Path, sub: Submission) -> Path:
    """Write the scripts into ``folder``; the batch script's path."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in {**sub.files, "task.sh": sub.task, "slurm-batch.sh": sub.batch}.items():
        path = folder / name
        path.write_text(content)
        path.chmod(0o755)
    return folder / "slurm-batch.sh"
