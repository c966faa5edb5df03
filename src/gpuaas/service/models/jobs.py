"""The Job spec users submit and the views the API returns, camelCase as in the YAML they write.

A spec is checked here for its shape (names, kinds, exactly one way to run, counts); what needs
the database (the LocalQueue, the priority class, a hardware profile the tenant may use) is
checked by :func:`gpuaas.service.jobs.submit_job`, naming the same fields.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpuaas.model.autoscale import ReplicaScaling
from gpuaas.model.topology import Level
from gpuaas.service.models.common import DNS_LABEL_PATTERN, ReasonView, Strict, unicode_text
from gpuaas.service.models.quantities import ASKS_FOR_SOMETHING, PodResources

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
#: The most pods one pod set may ask for (a bound on what one request can make the engine do).
MAX_PODS = 10_000


def _dns_label(value: str, what: str) -> str:
    if len(value) > 63 or not _DNS_LABEL.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} is not a DNS-1123 label (at most 63 lowercase letters, digits "
            "and '-', starting and ending with a letter or digit)"
        )
    return value


def _no_nul(value: str) -> str:
    """PostgreSQL cannot store a NUL character in text; refuse it on every database alike."""
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return unicode_text(value)  # here too, so that a list item's error names its index


#: Text without NUL characters or unpaired surrogates (the schema's pattern says the first).
Text = Annotated[str, AfterValidator(_no_nul), Field(json_schema_extra={"pattern": "^[^\\x00]*$"})]
#: The schema of a DNS-1123 label (``_dns_label`` checks it)
_LABEL_SCHEMA = {"pattern": DNS_LABEL_PATTERN, "minLength": 1, "maxLength": 63}


class JobKind(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"
    BATCH = "batch"
    MPI = "mpi"
    NOTEBOOK = "notebook"


def _env_names(env: dict[str, str]) -> dict[str, str]:
    for name in env:
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid environment variable name")
    return env


class Container(Strict):
    """A containerized job: the image and how to start it."""

    image: Text = Field(min_length=1, max_length=1000)
    command: list[Text] = Field(default_factory=list, max_length=1000)
    args: list[Text] = Field(default_factory=list, max_length=1000)
    env: dict[Text, Text] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        return _env_names(env)


class Topology(Strict):
    """All pods of the pod set in one domain of ``level`` (required) or preferably so."""

    level: str
    mode: str = "required"

    @field_validator("level")
    @classmethod
    def _level(cls, value: str) -> str:
        return Level.from_name(value).short  # ValueError names the known levels

    @field_validator("mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        if value not in ("required", "preferred"):
            raise ValueError(f"must be required or preferred, got {value!r}")
        return value


Quantity = Text | int | float


class NetworkSpec(Strict):
    """RDMA NICs / SR-IOV VFs per pod: ``count`` of them, or ``perGpu`` one per GPU; ``pool``
    the extended resource they are advertised as (empty: any RDMA pool of the node);
    ``alignment`` with the pod's GPUs (same PCIe root, else NUMA node): required, preferred,
    none; ``attachment`` the tenant's NetworkAttachmentDefinition the pods join (Kubernetes)."""

    pool: Text = Field(default="", max_length=253)
    count: int = Field(default=0, ge=0, le=64, strict=True)
    perGpu: StrictBool = False  # true or false: not 1, "yes" (as the document says)
    alignment: str = "preferred"
    attachment: Text | None = Field(default=None, min_length=1, max_length=253)

    @field_validator("alignment")
    @classmethod
    def _alignment(cls, value: str) -> str:
        if value not in ("required", "preferred", "none"):
            raise ValueError(f"must be required, preferred or none, got {value!r}")
        return value

    @model_validator(mode="after")
    def _count_or_per_gpu(self) -> NetworkSpec:
        if self.perGpu == (self.count > 0):
            raise ValueError("give count (NICs per pod) or perGpu: true, exactly one")
        return self


class DatasetRef(Strict):
    """The registered dataset the job reads, mounted at ``mountPath`` (default
    ``/datasets/<name>``); ``locality`` preferred or required (run only where it is warm)."""

    name: Text = Field(min_length=1, max_length=63)
    locality: str = "preferred"
    mountPath: Text | None = Field(default=None, min_length=1, max_length=1000)

    @field_validator("locality")
    @classmethod
    def _locality(cls, value: str) -> str:
        if value not in ("preferred", "required"):
            raise ValueError(f"must be preferred or required, got {value!r}")
        return value


class VolumeMount(Strict):
    """A volume of the job's cluster, by name, mounted at ``mountPath``."""

    name: Text = Field(min_length=1, max_length=63)
    mountPath: Text = Field(min_length=1, max_length=1000)
    readOnly: StrictBool = False


class PodSetSpec(Strict):
    """``count`` identical pods: per-pod ``resources``, or a ``hardwareProfile`` (whose defaults
    ``resources`` may then override). Each resource's name and amount is what
    :mod:`gpuaas.service.models.quantities` says, checked by the server when it reads them
    (``jobs._resolve_pod_sets``, so an error names ``podSets[i].resources.<resource>``)."""

    model_config = ConfigDict(
        json_schema_extra={  # _asks_for_something and _check_gpu_form's "nothing", said here
            "anyOf": [
                {"required": ["resources"], "properties": {"resources": ASKS_FOR_SOMETHING}},
                {
                    "required": ["hardwareProfile"],
                    "properties": {"hardwareProfile": {"type": "string"}},
                },
            ]
        }
    )

    name: str = Field(default="main", json_schema_extra=_LABEL_SCHEMA)
    count: int = Field(default=1, ge=1, le=MAX_PODS, strict=True)
    resources: PodResources | None = None
    hardwareProfile: Text | None = Field(default=None, min_length=1, max_length=253)
    topology: Topology | None = None
    network: NetworkSpec | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _dns_label(value, "pod set name")

    @model_validator(mode="after")
    def _asks_for_something(self) -> PodSetSpec:
        if self.hardwareProfile is None and not self.resources:
            raise ValueError("give resources or a hardwareProfile")
        return self


class ReplicaAutoscale(Strict):
    """An inference job's replicas kept between ``minReplicas`` and ``maxReplicas`` on GPU
    utilisation against ``targetUtilization`` (a percentage), within its cluster and then
    across ``clusters`` (the tenant's) when that one is full. Each replica is a copy of the
    job (the job itself is the first, so ``minReplicas`` is at least 1); see
    docs/workload-autoscaling.md."""

    minReplicas: int = Field(ge=1, le=MAX_PODS)
    maxReplicas: int = Field(ge=1, le=MAX_PODS)
    targetUtilization: float = Field(default=70.0, gt=0, le=100)
    clusters: list[Text] = Field(default_factory=list, max_length=16)
    cooldownSeconds: float = Field(default=60.0, ge=0, le=86400)

    @field_validator("maxReplicas")
    @classmethod
    def _bounds(cls, value: int, info: ValidationInfo) -> int:
        low = info.data.get("minReplicas")
        if low is not None and value < low:
            raise ValueError(f"must be at least minReplicas ({low}), got {value}")
        return value

    def spec(self) -> ReplicaScaling:
        return ReplicaScaling(self.minReplicas, self.maxReplicas, self.targetUtilization,
                              tuple(self.clusters), self.cooldownSeconds)  # fmt: skip


class UtilizationProfile(Strict):
    """How busy the job keeps its devices, for the simulated fleet's telemetry
    (docs/telemetry.md): ``gpu`` and ``memory`` in percent of each device, and optionally a
    load that varies by ``amplitude`` percent around ``gpu`` over ``period`` seconds.
    ``total`` (docs/workload-autoscaling.md): the load of the whole job in percent of one
    replica's devices (250: two and a half replicas fully busy), spread evenly over the
    replicas running: each reads ``min(100, total / running)`` in place of ``gpu`` (and
    ``amplitude / running``), so scaling it is seen in its replicas' utilisation."""

    model_config = ConfigDict(
        json_schema_extra={  # _varies, said in the schema
            "anyOf": [
                {"properties": {"amplitude": {"maximum": 0}}},
                {"required": ["period"], "properties": {"period": {"type": "number"}}},
            ]
        }
    )

    gpu: float = Field(default=80.0, ge=0, le=100)
    memory: float = Field(default=50.0, ge=0, le=100)
    amplitude: float = Field(default=0.0, ge=0, le=100)
    period: float | None = Field(default=None, gt=0, le=7 * 86400)
    total: float | None = Field(default=None, ge=0, le=100 * MAX_PODS)

    @model_validator(mode="after")
    def _varies(self) -> UtilizationProfile:
        if self.amplitude > 0 and self.period is None:
            raise ValueError("period: a load that varies (amplitude > 0) needs a period")
        return self


#: a pod set that names a hardware profile (whose LocalQueue the job then queues in)
_HAS_PROFILE = {
    "required": ["hardwareProfile"],
    "properties": {"hardwareProfile": {"type": "string"}},
}


class JobSpec(Strict):
    """What a user submits; see the contract's example."""

    model_config = ConfigDict(
        json_schema_extra={  # _one_way_to_run and _inference_only, said in the schema
            "oneOf": [
                {"required": [way], "properties": {way: {"not": {"type": "null"}}}}
                for way in ("container", "command", "script")
            ],
            "allOf": [
                {
                    "anyOf": [
                        {"properties": {"autoscale": {"type": "null"}}},
                        {"required": ["kind"], "properties": {"kind": {"const": "inference"}}},
                    ]
                },
                {  # jobs._resolve_pod_sets: a queue, or a cluster or hardware profile naming one
                    "anyOf": [
                        {"required": [field], "properties": {field: {"type": "string"}}}
                        for field in ("queue", "cluster")
                    ]
                    + [
                        {
                            "required": ["podSets"],
                            "properties": {"podSets": {"contains": _HAS_PROFILE}},
                        }
                    ]
                },
            ],
        }
    )

    name: str = Field(json_schema_extra=_LABEL_SCHEMA)
    kind: JobKind = JobKind.BATCH
    queue: Text | None = Field(default=None, min_length=1, max_length=63)
    priorityClass: Text | None = Field(default=None, min_length=1, max_length=253)
    idempotencyKey: Text | None = Field(default=None, min_length=1, max_length=200)
    maxRunTime: float | None = Field(default=None, gt=0, le=365 * 86400)
    container: Container | None = None
    command: list[Text] | None = Field(default=None, min_length=1, max_length=1000)
    script: Text | None = Field(default=None, min_length=1, max_length=100_000)
    #: environment variables of the job's processes (a container's own ``env`` comes first)
    env: dict[Text, Text] | None = Field(default=None, max_length=1000)
    podSets: list[PodSetSpec] = Field(min_length=1, max_length=16)
    duration: float | None = Field(default=None, gt=0, le=365 * 86400)
    #: the tenant cluster the job runs in (its nodes only); None: the shared pool
    cluster: Text | None = Field(default=None, min_length=1, max_length=63)
    dataset: DatasetRef | None = None
    volumes: list[VolumeMount] = Field(default_factory=list, max_length=32)
    #: inference only: scale the replicas on GPU utilisation
    autoscale: ReplicaAutoscale | None = None
    #: the load it puts on its devices, as the simulated fleet's telemetry reads it
    utilization: UtilizationProfile | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return _dns_label(value, "job name")

    @field_validator("env")
    @classmethod
    def _env(cls, env: dict[str, str] | None) -> dict[str, str] | None:
        return None if env is None else _env_names(env)

    @field_validator("podSets")
    @classmethod
    def _pods_in_all(cls, pod_sets: list[PodSetSpec]) -> list[PodSetSpec]:
        """A bound on the whole job, not only on each pod set: admitting a job is work (and a
        stored placement) in proportion to its pods, and one tenant's 16 x 10,000 pods once
        slowed every other tenant's admissions (docs/api.md)."""
        total = sum(ps.count for ps in pod_sets)
        if total > MAX_PODS:
            raise ValueError(f"{total:,} pods in all; a job has at most {MAX_PODS:,}")
        return pod_sets

    @field_validator("autoscale")
    @classmethod
    def _inference_only(
        cls, value: ReplicaAutoscale | None, info: ValidationInfo
    ) -> ReplicaAutoscale | None:
        kind = info.data.get("kind")
        if value is not None and kind is not None and kind is not JobKind.INFERENCE:
            raise ValueError(f"only an inference job scales its replicas, this is {kind.value}")
        return value

    @model_validator(mode="after")
    def _one_way_to_run(self) -> JobSpec:
        ways = [w for w in ("container", "command", "script") if getattr(self, w) is not None]
        if len(ways) != 1:
            raise ValueError(
                "give exactly one of container, command or script"
                + (f" (got {', '.join(ways)})" if ways else "")
            )
        names = [ps.name for ps in self.podSets]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"podSets[{i}].name: pod set name {name!r} is repeated")
        return self


class JobEventView(BaseModel):
    at: float
    fromState: str | None
    toState: str
    reason: str
    #: the reason's code (see ReasonView); null on events recorded before codes were kept
    code: str | None = None


class PodDeviceView(BaseModel):
    """A device a pod was given: its name on the node (``gpu-3``, ``gpu-3-mig-1g10gb-4``,
    ``gpu-3-ts-1``) and the UUID the pod's ``CUDA_VISIBLE_DEVICES`` carries."""

    name: str
    uuid: str


class PodView(BaseModel):
    """One pod of an admitted job: where it runs and on which devices; ``rank`` counts pods
    over all pod sets (the rank a distributed job's process takes)."""

    podSet: str
    index: int
    rank: int
    node: str
    devices: list[PodDeviceView]


class ReplicaClusterView(BaseModel):
    """An autoscaled job's replicas in one cluster (``""``: the shared pool)."""

    cluster: str
    running: int  # holding devices (admitted or running)
    pending: int  # waiting for admission, each with its own reason


class ReplicasView(BaseModel):
    """An autoscaled inference job's replicas (docs/workload-autoscaling.md): ``desired`` as
    the last decision set it, ``current`` holding devices, ``pending`` waiting; per cluster;
    the replica jobs (the job itself first); and the last scaling decision with its reason."""

    desired: int
    current: int
    pending: int
    minReplicas: int
    maxReplicas: int
    targetUtilization: float
    clusters: list[ReplicaClusterView]
    jobs: list[int]
    lastDecision: ReasonView | None = None
    decidedAt: float | None = None


class JobView(BaseModel):
    """A job as the API shows it: its spec, state and, once admitted, where it runs."""

    id: int
    tenant: str
    user: str
    name: str
    kind: str
    queue: str
    priorityClass: str | None
    priority: int
    state: str
    reason: ReasonView
    clusterQueue: str | None
    flavors: dict[str, Any] | None
    nodes: list[str]
    pods: list[PodView] = []
    gpus: float  # GPUs held while admitted (a MIG instance or share counts its size)
    attempts: int
    cancelRequested: bool
    createdAt: float
    admittedAt: float | None
    startedAt: float | None
    finishedAt: float | None
    spec: dict[str, Any]
    #: an autoscaled inference job's replicas (None for any other job)
    replicas: ReplicasView | None = None


class WorkloadView(BaseModel):
    """A job as admission sees it: where it queues, and why it waits."""

    id: int
    name: str
    user: str
    queue: str
    clusterQueue: str | None
    priority: int
    state: str
    reason: ReasonView
    flavors: dict[str, Any] | None
    gpus: float
    createdAt: float
    admittedAt: float | None


#: The most documents one batch may hold.
MAX_BATCH = 500


class JobBatch(Strict):
    """Job specs submitted together; each is checked as a single submission checks it."""

    jobs: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_BATCH)


class JobBatchItem(BaseModel):
    document: int  # its index in ``jobs``, from 0
    name: str
    created: bool  # False: its idempotencyKey had already made ``job``, or a dry run
    job: JobView | None  # None in a dry run for a job not made yet


class JobBatchView(BaseModel):
    dryRun: bool
    items: list[JobBatchItem]
