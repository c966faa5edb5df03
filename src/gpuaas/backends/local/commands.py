"""What a local pod runs, and with which environment.

Every pod of a job is one process group on this host, whatever node of the fleet the admission
chose (the node decides the devices, not the machine). Its environment is a small base taken
from the server's (:data:`BASE_VARIABLES`, so ``PATH`` finds the host's tools), then the job's
``env``, then what gpuaas sets and the job cannot override:

- ``CUDA_VISIBLE_DEVICES`` and ``NVIDIA_VISIBLE_DEVICES``: exactly the devices the pod was
  given, by UUID (a MIG instance by its ``MIG-...`` UUID), empty for a pod without GPUs;
- the rendezvous a PyTorch or MPI job expects, for every job (a single pod is a world of one):
  ``MASTER_ADDR`` (127.0.0.1: all pods run here), ``MASTER_PORT`` (a free port chosen per
  attempt), ``WORLD_SIZE`` (pods in the job), ``RANK`` (the pod's rank), ``NODE_RANK`` (the same:
  each pod is one torchrun "node" with its own devices), ``LOCAL_RANK`` (0: one process per
  pod), and ``GPUAAS_HOSTFILE``, an MPI hostfile with one slot per pod;
- ``GPUAAS_JOB_ID``, ``GPUAAS_JOB_NAME``, ``GPUAAS_ATTEMPT``, ``GPUAAS_POD_SET``,
  ``GPUAAS_POD_INDEX``, ``GPUAAS_NODE`` (the fleet node the admission chose);
- for a pod given RDMA NICs (a pod set's ``network``): ``NCCL_IB_HCA`` (the NICs' names) and
  ``GPUAAS_NICS`` (the VFs, ``mlx5_0-vf-3``), see :func:`gpuaas.backends.base.nic_variables`.

A ``command`` runs as given (its first word looked up on ``PATH``, or relative to the pod's
working directory when it has a slash); a ``script`` is written to ``script.sh`` in the pod's
directory and run with ``/bin/bash``; a ``container`` runs through the configured runtime
(``docker`` or ``podman`` ``run --rm``), with the same variables passed by ``-e`` and the devices
by ``--gpus`` (docker) or CDI ``--device nvidia.com/gpu=UUID`` (podman).

Volumes (``resolved.volumes``, docs/storage.md). A container gets each volume bind-mounted at
its ``mountPath`` (``-v DIR:PATH``, ``:ro`` when read-only) and ``GPUAAS_VOLUME_<NAME>`` set to
that path. A process has no mount namespace of its own (gpuaas makes no mounts on the host): it
finds a volume as a symlink at its ``mountPath`` made relative to its working directory
(``/data`` -> ``./data``) and at ``$GPUAAS_VOLUME_<NAME>`` (the volume's directory); read-only is
not enforced for processes (they run as the server's user, who owns the directory).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuaas.backends.base import BackendJob, nic_variables
from gpuaas.backends.storage.local import directory_usage
from gpuaas.model.placement import PodPlacement
from gpuaas.model.volume import mount_link, volume_env_name

#: Variables a pod takes from the server's environment (when set there).
BASE_VARIABLES = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR",
    "LD_LIBRARY_PATH",
)  # fmt: skip
#: What the container runtime's client also takes from the server (where its daemon is).
RUNTIME_VARIABLES = ("DOCKER_HOST", "DOCKER_CONFIG", "CONTAINER_HOST", "XDG_RUNTIME_DIR")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MASTER_ADDR = "127.0.0.1"


class CannotRun(Exception):
    """The job cannot run on this backend as given; the message says why (a REJECTED event)."""


def base_environment(server: Mapping[str, str] | None = None) -> dict[str, str]:
    server = os.environ if server is None else server
    env = {name: server[name] for name in BASE_VARIABLES if name in server}
    env.setdefault("PATH", DEFAULT_PATH)
    return env


def runtime_environment(
    base: Mapping[str, str], server: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a container runtime's client: the base and where its daemon is (the
    container itself gets only what is passed with ``-e``)."""
    server = os.environ if server is None else server
    return {**base, **{name: server[name] for name in RUNTIME_VARIABLES if name in server}}


def gpuaas_variables(
    job: BackendJob, pod: PodPlacement, master_port: int, hostfile: Path
) -> dict[str, str]:
    """What gpuaas sets for ``pod`` of ``job`` (see the module docstring)."""
    devices = pod.visible_devices
    return {
        "CUDA_VISIBLE_DEVICES": devices,
        "NVIDIA_VISIBLE_DEVICES": devices,
        "MASTER_ADDR": MASTER_ADDR,
        "MASTER_PORT": str(master_port),
        "WORLD_SIZE": str(len(job.pods)),
        "RANK": str(pod.rank),
        "NODE_RANK": str(pod.rank),
        "LOCAL_RANK": "0",
        "GPUAAS_HOSTFILE": str(hostfile),
        "GPUAAS_JOB_ID": str(job.id),
        "GPUAAS_JOB_NAME": job.name,
        "GPUAAS_ATTEMPT": str(job.attempt),
        "GPUAAS_POD_SET": pod.pod_set,
        "GPUAAS_POD_INDEX": str(pod.index),
        "GPUAAS_NODE": pod.node,
        **nic_variables(pod),
    }


def job_environment(spec: Mapping[str, Any]) -> dict[str, str]:
    """The job's own ``env`` (checked for names at submission)."""
    return {str(k): str(v) for k, v in (spec.get("env") or {}).items()}


def hostfile_text(job: BackendJob) -> str:
    """An MPI hostfile: one slot per pod, all on this host (the fleet node in a comment)."""
    lines = [f"# gpuaas job {job.id} attempt {job.attempt}: {len(job.pods)} pods, one slot each"]
    lines += [f"{MASTER_ADDR} slots=1  # rank {p.rank} on {p.node}" for p in job.pods]
    return "\n".join(lines) + "\n"


def process_command(spec: Mapping[str, Any], pod_dir: Path, env: Mapping[str, str]) -> list[str]:
    """The argv of a ``command`` or ``script`` job's pod; CannotRun when it cannot start."""
    script = spec.get("script")
    if script is not None:
        path = pod_dir / "script.sh"
        path.write_text(str(script))
        return ["/bin/bash", str(path)]
    command = [str(word) for word in spec.get("command") or ()]
    if not command:
        raise CannotRun("the job gives no command, script or container to run")
    program = command[0]
    if "/" in program:
        where = pod_dir / program
        if not where.is_file():
            raise CannotRun(f"command {program!r} does not exist")
        if not os.access(where, os.X_OK):
            raise CannotRun(f"command {program!r} is not executable")
    elif shutil.which(program, path=env.get("PATH", DEFAULT_PATH)) is None:
        raise CannotRun(
            f"command {program!r} was not found on the job's PATH ({env.get('PATH', '')})"
        )
    return command


def container_name(job: BackendJob, pod: PodPlacement) -> str:
    return f"gpuaas-{job.id}-{job.attempt}-{pod.rank}"


def container_command(
    runtime: str, job: BackendJob, pod: PodPlacement, env: Mapping[str, str]
) -> list[str]:
    """``RUNTIME run --rm ...`` for a ``container`` job's pod: the image with the job's env and
    gpuaas' variables, on the host network (rendezvous on 127.0.0.1), given its devices."""
    container = job.spec["container"]
    argv = [runtime, "run", "--rm", "--name", container_name(job, pod), "--network", "host"]
    for name, value in env.items():
        argv += ["-e", f"{name}={value}"]
    uuids = [u for u in pod.visible_devices.split(",") if u]
    if uuids and "podman" in Path(runtime).name:
        for uuid in uuids:
            argv += ["--device", f"nvidia.com/gpu={uuid}"]
    elif uuids:
        argv += ["--gpus", f'"device={",".join(uuids)}"']
    for mount in volume_mounts(job.spec):
        ro = ":ro" if mount.get("readOnly") else ""
        argv += ["-v", f"{mount['path']}:{mount['mountPath']}{ro}"]
    command: Sequence[str] = container.get("command") or ()
    if command:
        argv += ["--entrypoint", command[0]]
    argv.append(container["image"])
    argv += [*command[1:], *(container.get("args") or ())]
    return argv


def container_environment(job: BackendJob, variables: Mapping[str, str]) -> dict[str, str]:
    """What a container is given: the container's and the job's env, then gpuaas' variables."""
    container = job.spec.get("container") or {}
    env = {str(k): str(v) for k, v in (container.get("env") or {}).items()}
    env.update(job_environment(job.spec))
    env.update(volume_variables(job.spec, inside=True))
    env.update(variables)
    return env


def volume_mounts(spec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The job's volumes as resolved at submission (``{name, mountPath, readOnly, path}``);
    CannotRun for one this host cannot give (no directory: a claim, an NFS export not mounted
    here) or a read-write one whose measured usage reached its size."""
    mounts = list((spec.get("resolved") or {}).get("volumes") or ())
    for mount in mounts:
        path = str(mount.get("path") or "")
        if not path or not Path(path).is_dir():
            where = path or f"claim {mount.get('claim')}"
            raise CannotRun(f"volume {mount['name']} is not available on this host ({where})")
        size = mount.get("sizeBytes")
        if not mount.get("readOnly") and mount.get("enforcement") == "measure" and size:
            used = directory_usage(Path(path))
            if used >= int(size):
                raise CannotRun(f"volume {mount['name']} is full ({used} of {size} bytes used)")
    return mounts


def volume_variables(spec: Mapping[str, Any], inside: bool) -> dict[str, str]:
    """``GPUAAS_VOLUME_<NAME>``: the mount path in a container (``inside``), the volume's
    directory for a process."""
    return {
        volume_env_name(str(m["name"])): str(m["mountPath"] if inside else m["path"])
        for m in (spec.get("resolved") or {}).get("volumes") or ()
    }


def link_volumes(spec: Mapping[str, Any], pod_dir: Path) -> None:
    """Each volume as a symlink at its mount path below the pod's working directory."""
    for mount in volume_mounts(spec):
        link = pod_dir / mount_link(str(mount["mountPath"]))
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(str(mount["path"]), target_is_directory=True)
