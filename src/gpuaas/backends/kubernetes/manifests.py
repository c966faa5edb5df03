"""A gpuaas job as Kubernetes objects, for one target scheduler: pure data, no client.

Shapes. One pod set is a ``batch/v1`` Job (``completions`` = ``parallelism`` = the pod count,
``completionMode: Indexed`` when there are several pods, so each pod knows its index); several
pod sets are a ``jobset.x-k8s.io/v1alpha2`` JobSet with one replicated Job per pod set. On the
Volcano target every job is a ``batch.volcano.sh/v1alpha1`` Job, one task per pod set, since
Volcano's gang (``minAvailable``) spans its tasks. Restarts are gpuaas's business (it requeues
a failed or evicted job as a new attempt): ``restartPolicy: Never``, ``backoffLimit: 0``,
JobSet ``maxRestarts: 0``, Volcano ``maxRetry: 0``. ``maxRunTime`` becomes
``activeDeadlineSeconds``.

Every object carries the labels :func:`labels` names (tenant, job id, attempt,
``app.kubernetes.io/managed-by: gpuaas``, and for a replica of an autoscaled inference job
the job it replicates, so the set is one selector: each replica is a Job of its own whose
``parallelism`` is its pod count) and is called ``gpuaas-<id>-<attempt>`` in the
tenant's namespace (``namespace`` pattern, default ``gpuaas-{tenant}``), so an attempt is one
name: creating it twice is a conflict the API server refuses, never a second run.

Pinning. gpuaas already chose each pod's node; a pod set's pods get a required node affinity
on ``kubernetes.io/hostname`` In the nodes its pods were placed on. A Job cannot give each
index its own node, so when a pod set has exactly one pod per node (the usual gang: one pod per
8-GPU host) a required pod anti-affinity on the hostname among that pod set's pods makes the
node set exact: N pods on N named nodes, one each. When a pod set puts several pods on each of
several nodes, the node set is exact but how many pods land on each is the cluster
scheduler's, bounded by the pods' requests; the pod template's ``gpuaas.io/placement``
annotation records gpuaas's exact plan (index -> node, devices) for audit and for an admission
webhook that wants to enforce it. Device plugins choose the device instance themselves
(``nvidia.com/gpu``, ``nvidia.com/mig-<profile>``): gpuaas's per-device choice reaches the
pod only through DRA claims, whose CEL selectors may name devices. A job not yet admitted has
no placement and is rendered without node pinning (what ``gpuaas jobs manifest`` shows before
admission).

DRA. The job API carries no device claims yet; a caller that has them (the engine's
:class:`~gpuaas.model.workload.DeviceClaim`, per pod set) passes them in ``claims`` and each
becomes a ``resource.k8s.io/v1`` ResourceClaimTemplate (one request of ``count`` devices of
the DeviceClass, the CEL selectors, ``matchAttribute`` constraints) referenced from the pod's
``resourceClaims`` and the container's ``resources.claims``.

Networks and data. A pod set with ``network`` requests its VFs and joins the tenant's
NetworkAttachmentDefinition (:mod:`gpuaas.backends.kubernetes.network`); a job with ``dataset``
mounts the Fluid dataset's PVC read-only (:mod:`gpuaas.backends.kubernetes.fluid`), checked
against ``datasets`` (the tenant's registered datasets) when the caller gives them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuaas.backends.base import BackendJob
from gpuaas.backends.kubernetes import targets as t
from gpuaas.backends.kubernetes.fluid import dataset_volume
from gpuaas.backends.kubernetes.network import pod_network, pod_set_network
from gpuaas.backends.kubernetes.targets import Target
from gpuaas.model.dataset import Dataset
from gpuaas.model.errors import InvalidValue
from gpuaas.model.node import Node
from gpuaas.model.placement import PodPlacement
from gpuaas.model.resources import CPU, GPU_MILLI, MEMORY, NVIDIA_GPU, format_amount
from gpuaas.model.topology import Level
from gpuaas.model.workload import DeviceClaim

MANAGED_BY = "app.kubernetes.io/managed-by"
TENANT = "gpuaas.io/tenant"
JOB_ID = "gpuaas.io/job-id"
ATTEMPT = "gpuaas.io/attempt"
POD_SET = "gpuaas.io/pod-set"
PLACEMENT = "gpuaas.io/placement"
#: an autoscaled inference job's replicas (the job itself and each replica job) carry the
#: job's id: ``-l gpuaas.io/replica-of=<id>`` selects the set (docs/workload-autoscaling.md)
REPLICA_OF = "gpuaas.io/replica-of"
HOSTNAME = "kubernetes.io/hostname"
CONTAINER = "main"
DEFAULT_NAMESPACE = "gpuaas-{tenant}"
DEFAULT_BASE_IMAGE = "docker.io/library/ubuntu:24.04"

_NOT_DNS = re.compile(r"[^a-z0-9-]+")


@dataclass(frozen=True, slots=True)
class ManifestOptions:
    """``namespace``: the tenant's namespace, ``{tenant}`` replaced by the tenant's name;
    ``base_image``: where a job without a container runs its command or script; ``claims``:
    DRA device claims per pod set name (see the module docstring); ``datasets``: the tenant's
    registered datasets by name (None: a job's ``dataset`` is mounted unchecked); ``nodes``:
    the fleet's nodes by name, for the pool of NICs a pod set was placed on when it named none.
    """

    target: Target = Target.KUEUE
    namespace: str = DEFAULT_NAMESPACE
    base_image: str = DEFAULT_BASE_IMAGE
    claims: Mapping[str, Sequence[DeviceClaim]] = field(default_factory=dict)
    datasets: Mapping[str, Dataset] | None = None
    nodes: Mapping[str, Node] | None = None


def dns_label(value: str) -> str:
    """``value`` as a DNS-1123 label: lower case, ``-`` for anything else, at most 63."""
    label = _NOT_DNS.sub("-", value.lower()).strip("-")[:63].strip("-")
    return label or "x"


def object_name(job_id: int, attempt: int) -> str:
    return f"gpuaas-{job_id}-{attempt}"


def namespace_of(tenant: str, pattern: str = DEFAULT_NAMESPACE) -> str:
    return dns_label(pattern.format(tenant=dns_label(tenant or "default")))


def labels(job: BackendJob) -> dict[str, str]:
    """The labels every object of ``job`` carries: what ties it to gpuaas, tenant, job, try."""
    out = {
        MANAGED_BY: "gpuaas",
        TENANT: dns_label(job.tenant or "default"),
        JOB_ID: str(job.id),
        ATTEMPT: str(job.attempt),
    }
    if "replicaOf" in job.spec or "autoscale" in job.spec:
        out[REPLICA_OF] = str(job.spec.get("replicaOf", job.id))
    return out


def render(job: BackendJob, options: ManifestOptions | None = None) -> list[dict[str, Any]]:
    """The objects that run ``job`` on ``options.target``, in the order they are created
    (claim templates before the pods that use them); InvalidValue names what cannot be
    expressed."""
    options = options or ManifestOptions()
    pod_sets = _pod_sets(job)
    name = object_name(job.id, job.attempt)
    namespace = namespace_of(job.tenant, options.namespace)
    out: list[dict[str, Any]] = []
    templates: dict[str, dict[str, Any]] = {}
    for ps in pod_sets:
        claims = list(options.claims.get(ps["name"], ()))
        for claim in claims:
            out.append(_claim_template(job, name, namespace, ps["name"], claim))
        pods = [p for p in job.pods if p.pod_set == ps["name"]]
        templates[ps["name"]] = _pod_template(job, options, ps, pods, claims, name)
    if options.target is Target.VOLCANO:
        out.append(_volcano_job(job, name, namespace, pod_sets, templates))
    elif len(pod_sets) == 1:
        ps = pod_sets[0]
        out.append(_batch_job(job, options.target, name, namespace, ps, templates[ps["name"]]))
    else:
        out.append(_jobset(job, options.target, name, namespace, pod_sets, templates))
    return out


# --- the job document ---------------------------------------------------------------------


def _pod_sets(job: BackendJob) -> list[Mapping[str, Any]]:
    resolved = job.spec.get("resolved") or {}
    pod_sets = resolved.get("podSets")
    if not pod_sets:
        raise InvalidValue("spec.resolved.podSets", "the job has no resolved pod sets")
    return list(pod_sets)


def queue_of(job: BackendJob) -> str:
    """The job's LocalQueue name (the resolved ``tenant/queue`` without the tenant)."""
    resolved = (job.spec.get("resolved") or {}).get("queue") or job.spec.get("queue") or ""
    return str(resolved).split("/", 1)[-1]


def _command(job: BackendJob, base_image: str) -> dict[str, Any]:
    """The container's image, command and args: the user's container, or their command or
    script in ``base_image``; a job with only a ``duration`` (a simulated one) sleeps it."""
    spec = job.spec
    container = spec.get("container")
    if container:
        out: dict[str, Any] = {"image": container["image"]}
        if container.get("command"):
            out["command"] = list(container["command"])
        if container.get("args"):
            out["args"] = list(container["args"])
        return out
    if spec.get("command"):
        return {"image": base_image, "command": list(spec["command"])}
    if spec.get("script"):
        return {"image": base_image, "command": ["/bin/sh", "-c", spec["script"]]}
    if spec.get("duration"):
        seconds = str(math.ceil(float(spec["duration"])))
        return {"image": base_image, "command": ["sleep", seconds]}
    raise InvalidValue("spec", "the job has no container, command, script or duration to run")


def _env(job: BackendJob, pod_set: str) -> list[dict[str, str]]:
    env: dict[str, str] = {}
    env.update({str(k): str(v) for k, v in (job.spec.get("env") or {}).items()})
    env.update(
        {str(k): str(v) for k, v in ((job.spec.get("container") or {}).get("env") or {}).items()}
    )
    env.update(
        {
            "GPUAAS_JOB_ID": str(job.id),
            "GPUAAS_ATTEMPT": str(job.attempt),
            "GPUAAS_POD_SET": pod_set,
        }
    )
    return [{"name": k, "value": v} for k, v in env.items()]


def _deadline(job: BackendJob) -> int | None:
    value = job.spec.get("maxRunTime")
    return math.ceil(float(value)) if value else None


# --- pods ---------------------------------------------------------------------------------


def _resources(
    target: Target, requests: Mapping[str, int]
) -> tuple[dict[str, Any], dict[str, str]]:
    """Container resources and pod annotations for one pod's canonical ``requests``.

    CPU and memory are requests; devices (whole GPUs, MIG instances, replicas, a share's
    target form) are requests and limits alike, as Kubernetes wants for extended resources.
    """
    req: dict[str, str] = {}
    devices: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for resource, amount in sorted(requests.items()):
        if amount <= 0:
            continue
        if resource in (CPU, MEMORY):
            req[resource] = format_amount(resource, amount)
        elif resource == GPU_MILLI:
            whole, share = divmod(amount, 1000)
            if whole and share:
                raise InvalidValue(
                    GPU_MILLI, f"{amount} milli-GPU is neither whole GPUs nor a share of one"
                )
            if whole:
                devices[NVIDIA_GPU] = str(int(devices.get(NVIDIA_GPU, "0")) + whole)
            else:
                devices.update(t.share_resources(target, share))
                annotations.update(t.share_annotations(target, share))
        else:
            devices[resource] = format_amount(resource, amount)
    out: dict[str, Any] = {}
    if req or devices:
        out["requests"] = {**req, **devices}
    if devices:
        out["limits"] = dict(devices)
    return out, annotations


def _affinity(job: BackendJob, pod_set: str, pods: Sequence[PodPlacement]) -> dict[str, Any]:
    nodes = sorted({p.node for p in pods})
    if not nodes:
        return {}
    term = {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": nodes}]}
    affinity: dict[str, Any] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    if len(nodes) > 1 and len(nodes) == len(pods):
        selector = {
            "matchLabels": {JOB_ID: str(job.id), ATTEMPT: str(job.attempt), POD_SET: pod_set}
        }
        affinity["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": selector, "topologyKey": HOSTNAME}
            ]
        }
    return affinity


def _placement_note(pods: Sequence[PodPlacement]) -> str:
    plan = [
        {"index": p.index, "rank": p.rank, "node": p.node, "devices": [d.name for d in p.devices]}
        for p in sorted(pods, key=lambda p: p.index)
    ]
    return json.dumps(plan, separators=(",", ":"))


def _pod_template(
    job: BackendJob,
    options: ManifestOptions,
    ps: Mapping[str, Any],
    pods: Sequence[PodPlacement],
    claims: Sequence[DeviceClaim],
    name: str,
) -> dict[str, Any]:
    target = options.target
    pod_set = str(ps["name"])
    requests = {str(r): int(v) for r, v in (ps.get("requests") or {}).items()}
    network_annotations: dict[str, str] = {}
    where, network = pod_set_network(job.spec, pod_set)
    if network:
        gpus = requests.get(NVIDIA_GPU, 0) or requests.get(GPU_MILLI, 0) // 1000
        namespace = namespace_of(job.tenant, options.namespace)
        vfs, network_annotations = pod_network(
            network, where, gpus, namespace, pods, options.nodes, requests
        )
        requests.update(vfs)
    resources, annotations = _resources(target, requests)
    annotations.update(network_annotations)
    container: dict[str, Any] = {"name": CONTAINER, **_command(job, options.base_image)}
    container["env"] = _env(job, pod_set)
    volumes, mounts = _volumes(job)  # the tenant's volumes, then the dataset's
    if job.spec.get("dataset"):
        volume, mount = dataset_volume(job.spec["dataset"], options.datasets)
        volumes.append(volume)
        mounts.append(mount)
    if claims:
        resources["claims"] = [{"name": dns_label(c.name)} for c in claims]
    if resources:
        container["resources"] = resources
    if mounts:
        container["volumeMounts"] = mounts
    pod_labels = {**labels(job), POD_SET: pod_set}
    queue = queue_of(job)
    priority = job.spec.get("priorityClass")
    if target is Target.KAI:
        pod_labels[t.KAI_QUEUE] = queue
        if priority:
            pod_labels[t.KAI_PRIORITY] = str(priority)
    topology = ps.get("topology")
    if target is Target.KUEUE and topology:
        key = (
            t.KUEUE_REQUIRED_TOPOLOGY
            if topology.get("mode") == "required"
            else t.KUEUE_PREFERRED_TOPOLOGY
        )
        annotations[key] = Level.from_name(str(topology["level"])).value
    if pods:
        annotations[PLACEMENT] = _placement_note(pods)
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if volumes:
        spec["volumes"] = volumes
    if target is Target.VOLCANO:
        spec["schedulerName"] = t.VOLCANO_SCHEDULER
    elif target is Target.KAI:
        spec["schedulerName"] = t.KAI_SCHEDULER
    affinity = _affinity(job, pod_set, pods)
    if affinity:
        spec["affinity"] = affinity
    if claims:
        spec["resourceClaims"] = [
            {"name": dns_label(c.name), "resourceClaimTemplateName": _claim_name(name, pod_set, c)}
            for c in claims
        ]
    metadata: dict[str, Any] = {"labels": pod_labels}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": spec}


def _volumes(job: BackendJob) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the container's mounts for the job's ``resolved.volumes``: each a
    PersistentVolumeClaim of the tenant's namespace (the storage's claim, docs/storage.md), or,
    for a volume that is a directory on the nodes (local, NFS), a ``hostPath``."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for mount in (job.spec.get("resolved") or {}).get("volumes") or ():
        name = dns_label(f"vol-{mount['name']}")
        read_only = bool(mount.get("readOnly"))
        if mount.get("claim"):
            source = {"persistentVolumeClaim": {"claimName": str(mount["claim"])}}
            if read_only:
                source["persistentVolumeClaim"]["readOnly"] = True
        else:
            source = {"hostPath": {"path": str(mount["path"]), "type": "Directory"}}
        volumes.append({"name": name, **source})
        entry = {"name": name, "mountPath": str(mount["mountPath"])}
        mounts.append({**entry, "readOnly": True} if read_only else entry)
    return volumes, mounts


# --- DRA ----------------------------------------------------------------------------------


def _claim_name(name: str, pod_set: str, claim: DeviceClaim) -> str:
    return dns_label(f"{name}-{pod_set}-{claim.name}")


def _claim_template(
    job: BackendJob, name: str, namespace: str, pod_set: str, claim: DeviceClaim
) -> dict[str, Any]:
    request_name = dns_label(claim.name)
    exactly: dict[str, Any] = {
        "deviceClassName": claim.device_class,
        "allocationMode": "ExactCount",
        "count": claim.count,
    }
    if claim.selectors:
        exactly["selectors"] = [{"cel": {"expression": s}} for s in claim.selectors]
    devices: dict[str, Any] = {"requests": [{"name": request_name, "exactly": exactly}]}
    if claim.match_attributes:
        devices["constraints"] = [
            {"requests": [request_name], "matchAttribute": a} for a in claim.match_attributes
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": _metadata(job, _claim_name(name, pod_set, claim), namespace),
        "spec": {
            "metadata": {"labels": {**labels(job), POD_SET: pod_set}},
            "spec": {"devices": devices},
        },
    }


# --- workloads ----------------------------------------------------------------------------


def _metadata(
    job: BackendJob, name: str, namespace: str, extra: Mapping[str, str] | None = None
) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": {**labels(job), **(extra or {})}}


def _workload_labels(job: BackendJob, target: Target) -> dict[str, str]:
    """Kueue reads its labels from the Job or JobSet; KAI's pod grouper reads the queue from
    the top owner, so the queue label is on the workload as well as on its pods."""
    if target is Target.KAI:
        return {t.KAI_QUEUE: queue_of(job)}
    if target is not Target.KUEUE:
        return {}
    out = {t.QUEUE_NAME: queue_of(job)}
    if job.spec.get("priorityClass"):
        out[t.KUEUE_PRIORITY] = str(job.spec["priorityClass"])
    return out


def _job_spec(job: BackendJob, count: int, template: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"parallelism": count, "completions": count, "backoffLimit": 0}
    if count > 1:
        spec["completionMode"] = "Indexed"
    deadline = _deadline(job)
    if deadline:
        spec["activeDeadlineSeconds"] = deadline
    spec["template"] = template
    return spec


def _batch_job(
    job: BackendJob,
    target: Target,
    name: str,
    namespace: str,
    ps: Mapping[str, Any],
    template: dict[str, Any],
) -> dict[str, Any]:
    spec = _job_spec(job, int(ps["count"]), template)
    if target is Target.KUEUE:
        spec = {"suspend": True, **spec}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(job, name, namespace, _workload_labels(job, target)),
        "spec": spec,
    }


def _jobset(
    job: BackendJob,
    target: Target,
    name: str,
    namespace: str,
    pod_sets: Sequence[Mapping[str, Any]],
    templates: Mapping[str, dict[str, Any]],
) -> dict[str, Any]:
    replicated = [
        {
            "name": str(ps["name"]),
            "replicas": 1,
            "template": {
                "metadata": {"labels": {**labels(job), POD_SET: str(ps["name"])}},
                "spec": _job_spec(job, int(ps["count"]), templates[str(ps["name"])]),
            },
        }
        for ps in pod_sets
    ]
    spec: dict[str, Any] = {"replicatedJobs": replicated, "failurePolicy": {"maxRestarts": 0}}
    if target is Target.KUEUE:
        spec["suspend"] = True
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": _metadata(job, name, namespace, _workload_labels(job, target)),
        "spec": spec,
    }


def _volcano_job(
    job: BackendJob,
    name: str,
    namespace: str,
    pod_sets: Sequence[Mapping[str, Any]],
    templates: Mapping[str, dict[str, Any]],
) -> dict[str, Any]:
    tasks = []
    for ps in pod_sets:
        template = templates[str(ps["name"])]
        deadline = _deadline(job)
        if deadline:
            template = {**template, "spec": {**template["spec"], "activeDeadlineSeconds": deadline}}
        tasks.append(
            {
                "name": str(ps["name"]),
                "replicas": int(ps["count"]),
                "maxRetry": 0,
                "template": template,
            }
        )
    spec: dict[str, Any] = {
        "schedulerName": t.VOLCANO_SCHEDULER,
        "queue": queue_of(job),
        "minAvailable": sum(int(ps["count"]) for ps in pod_sets),
        "maxRetry": 0,
        "tasks": tasks,
    }
    if job.spec.get("priorityClass"):
        spec["priorityClassName"] = str(job.spec["priorityClass"])
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": _metadata(job, name, namespace),
        "spec": spec,
    }
