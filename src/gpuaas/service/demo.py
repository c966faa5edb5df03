"""Demo mode (``gpuaas serve --demo``, what ``make run`` starts): a GPU cloud that is alive.

:func:`seed_demo` fills an empty installation once (Meta ``demo.seeded``):

- the fleet of ``gpuaas/supply/data/service-demo-fleet.yaml`` when no node is registered
  (66 nodes: H100 racks with NVLink domains, MIG-partitioned A100s, time-sliced L40S, CPU);
- ResourceFlavors ``h100``, ``a100-mig``, ``l40s-shared`` and ``cpu`` (selecting the fleet's
  ``gpuaas.io/pool`` label, tolerating NVIDIA's taints), the Cohort ``demo-cloud``, priority
  classes and hardware profiles;
- three tenants, each granted capacity in a root cohort of its own (named after the tenant) that
  the provider placed under ``demo-cloud`` with explicit borrowing limits
  (:mod:`gpuaas.service.tenancy`): idle grant is lent to the others, and a tenant borrows at
  most its limit. Each has ClusterQueues in its root cohort holding its grant (preemption: lower
  priority within the queue, reclaim of lent quota) and LocalQueues named after the hardware
  they reach (``h100``, ``a100-mig``, ``l40s``, ``cpu``):

  - ``acme-ai`` (LLM training): alice (tenant-admin), arjun (tenant-user), ava (viewer);
  - ``globex-research`` (HPC / MPI): gina (tenant-admin), gus (tenant-user);
  - ``initech-apps`` (inference services): ivan (tenant-admin), isla (tenant-user);

  plus ``olga``, a platform-wide viewer (operations).

Governance objects go through :func:`gpuaas.service.governance.put_objects`, so they are checked
exactly like API writes. Each demo user gets one API token, created at the first seed and written
to ``<data dir>/demo-tokens.json`` (mode 0600, like the demo's admin token) as
``{"users": [{"user", "tenant", "role", "token"}]}``; the README tour reads it, e.g.
``jq -r '.users[] | select(.user=="arjun").token' .gpuaas/demo-tokens.json``.
:func:`seed_demo` returns the same list. Nothing is printed.

:class:`JobStream` then submits a realistic mix of jobs (training gangs on an NVLink domain, MPI
ranks across a rack, MIG inference replicas, time-sliced notebooks, CPU preprocessing) every
``settings.demo_job_interval`` seconds through :func:`gpuaas.service.jobs.submit_job`, as the
tenants' users. Every job declares a ``duration`` so the simulated backend finishes it. When the
server runs jobs as local processes (``--backend local``: this host has no GPU cluster to run
``torchrun`` or ``mpirun`` on), each job is submitted as a short script instead, which prints what
it stands for, the rank and the devices it was given, and sleeps for its duration (divided by
``--speed``, at most :data:`STAND_IN_MAX` seconds): real processes with real exit codes and logs,
honest about being stand-ins. A queue
with many jobs already waiting gets none until some are admitted, so a demo left running (or
running without a reconciler) does not grow its queues without bound.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gpuaas.model.job_state import JobState
from gpuaas.service.auth import Role, mint_token, scope_of
from gpuaas.service.fleet import register_nodes
from gpuaas.service.governance import document, put_objects
from gpuaas.service.jobs import submit_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.service.settings import Settings
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, Membership, Meta, NodeRow, Tenant, User
from gpuaas.supply.loaders._yaml import parse_yaml

log = logging.getLogger("gpuaas.service.demo")

SERVICE_DEMO_FLEET = "data/service-demo-fleet.yaml"
SEEDED = "demo.seeded"
TOKENS_FILE = "demo-tokens.json"
COHORT = "demo-cloud"
#: A LocalQueue with this many pending jobs gets no new demo job until some are admitted.
MAX_PENDING_PER_QUEUE = 6

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
SHARED_TOLERATION = {"key": "nvidia.com/gpu.shared", "operator": "Exists", "effect": "NoSchedule"}
#: flavor -> (the fleet's gpuaas.io/pool label, tolerations)
FLAVORS: dict[str, tuple[str, list[dict[str, str]]]] = {
    "h100": ("training", [GPU_TOLERATION]),
    "a100-mig": ("inference", [GPU_TOLERATION]),
    "l40s-shared": ("shared", [SHARED_TOLERATION]),
    "cpu": ("cpu", []),
}
NODE_RESOURCES = ["cpu", "memory", "nvidia.com/gpu"]
MIG_RESOURCES = [
    "cpu",
    "memory",
    "nvidia.com/mig-1g.10gb",
    "nvidia.com/mig-2g.20gb",
    "nvidia.com/mig-3g.40gb",
]
PRIORITY_CLASSES = {
    "production": (1000, "Customer-facing services and deadlines"),
    "high": (500, "Important training runs"),
    "normal": (100, "Everyday work"),
    "preemptible": (0, "Sweeps and batch that may be evicted at any time"),
}


@dataclass(frozen=True, slots=True)
class Queue:
    """A tenant's ClusterQueue on one flavor and the LocalQueue that reaches it.

    ``quota``: resource -> (nominal, what the provider lets the tenant borrow beyond it in
    ``demo-cloud``); the nominal quota is the tenant's grant, the borrowing limit the root
    cohort's."""

    local: str
    flavor: str
    resources: tuple[str, ...]
    quota: Mapping[str, tuple[str | int, str | int]]


@dataclass(frozen=True, slots=True)
class DemoTenant:
    name: str
    display_name: str
    queues: tuple[Queue, ...]
    users: tuple[tuple[str, str, Role], ...]  # (user, display name, role)


TENANTS = (
    DemoTenant(
        "acme-ai",
        "ACME AI (LLM training)",
        (
            Queue(
                "h100",
                "h100",
                tuple(NODE_RESOURCES),
                {"cpu": ("3072", "1536"), "memory": ("32Ti", "16Ti"), "nvidia.com/gpu": (128, 64)},
            ),
            Queue(
                "l40s",
                "l40s-shared",
                tuple(NODE_RESOURCES),
                {"cpu": ("256", "128"), "memory": ("2Ti", "1Ti"), "nvidia.com/gpu": (64, 32)},
            ),
        ),
        (
            ("alice", "Alice (ACME platform lead)", Role.TENANT_ADMIN),
            ("arjun", "Arjun (ACME ML engineer)", Role.TENANT_USER),
            ("ava", "Ava (ACME finance)", Role.VIEWER),
        ),
    ),
    DemoTenant(
        "globex-research",
        "Globex Research (HPC / MPI)",
        (
            Queue(
                "h100",
                "h100",
                tuple(NODE_RESOURCES),
                {"cpu": ("2304", "1536"), "memory": ("24Ti", "16Ti"), "nvidia.com/gpu": (96, 64)},
            ),
            Queue(
                "cpu", "cpu", ("cpu", "memory"), {"cpu": ("384", 192), "memory": ("3Ti", "1536Gi")}
            ),
        ),
        (
            ("gina", "Gina (Globex research computing)", Role.TENANT_ADMIN),
            ("gus", "Gus (Globex scientist)", Role.TENANT_USER),
        ),
    ),
    DemoTenant(
        "initech-apps",
        "Initech Apps (inference)",
        (
            Queue(
                "a100-mig",
                "a100-mig",
                tuple(MIG_RESOURCES),
                {
                    "cpu": ("1536", "512"),
                    "memory": ("12Ti", "4Ti"),
                    "nvidia.com/mig-1g.10gb": (560, 112),
                    "nvidia.com/mig-2g.20gb": (24, 8),
                    "nvidia.com/mig-3g.40gb": (24, 8),
                },
            ),
            Queue(
                "l40s",
                "l40s-shared",
                tuple(NODE_RESOURCES),
                {"cpu": ("384", "128"), "memory": ("3Ti", "1Ti"), "nvidia.com/gpu": (96, 32)},
            ),
        ),
        (
            ("ivan", "Ivan (Initech SRE lead)", Role.TENANT_ADMIN),
            ("isla", "Isla (Initech developer)", Role.TENANT_USER),
        ),
    ),
)
PLATFORM_VIEWER = ("olga", "Olga (provider operations)")


def _range(name: str, minimum: str | int, default: str | int, maximum: str | int) -> dict[str, Any]:
    return {"name": name, "min": minimum, "default": default, "max": maximum}


#: name -> (display name, LocalQueue, allowed tenants, resources)
HARDWARE_PROFILES: dict[str, tuple[str, str, list[str], list[dict[str, Any]]]] = {
    "h100-8x": (
        "8x H100 80GB (a whole HGX node)",
        "h100",
        ["acme-ai", "globex-research"],
        [
            _range("nvidia.com/gpu", 8, 8, 8),
            _range("cpu", "16", "176", "184"),
            _range("memory", "64Gi", "1800Gi", "1900Gi"),
        ],
    ),
    "h100-1x": (
        "1-4x H100 80GB (fine-tuning, debugging)",
        "h100",
        ["acme-ai", "globex-research"],
        [
            _range("nvidia.com/gpu", 1, 1, 4),
            _range("cpu", "4", "22", "88"),
            _range("memory", "32Gi", "240Gi", "960Gi"),
        ],
    ),
    "a100-mig-1g": (
        "A100 MIG 1g.10gb (one seventh of an A100)",
        "a100-mig",
        ["initech-apps"],
        [
            _range("nvidia.com/mig-1g.10gb", 1, 1, 1),
            _range("cpu", "1", "2", "8"),
            _range("memory", "4Gi", "16Gi", "64Gi"),
        ],
    ),
    "a100-mig-3g": (
        "A100 MIG 3g.40gb (three sevenths of an A100, 40 GB)",
        "a100-mig",
        ["initech-apps"],
        [
            _range("nvidia.com/mig-3g.40gb", 1, 1, 1),
            _range("cpu", "2", "8", "16"),
            _range("memory", "16Gi", "64Gi", "128Gi"),
        ],
    ),
    "l40s-quarter": (
        "A quarter of an L40S (one time-sliced replica)",
        "l40s",
        ["acme-ai", "initech-apps"],
        [
            _range("nvidia.com/gpu", 1, 1, 1),
            _range("cpu", "1", "4", "16"),
            _range("memory", "4Gi", "24Gi", "120Gi"),
        ],
    ),
    "cpu-large": (
        "32 cores, 128 GiB (no GPU)",
        "cpu",
        ["globex-research"],
        [_range("cpu", "1", "32", "96"), _range("memory", "1Gi", "128Gi", "760Gi")],
    ),
}


@dataclass(frozen=True, slots=True)
class DemoUser:
    user: str
    tenant: str | None  # None: a platform-wide role
    role: str
    token: str


# --- seeding ------------------------------------------------------------------------------


def seed_demo(db: Database, settings: Settings) -> list[DemoUser]:
    """Seed the demo once; returns the demo users and their tokens (also in ``demo-tokens.json``).

    Later calls change nothing and return what the tokens file holds (empty if it was removed).
    """
    tokens_path = Path(settings.data_dir) / TOKENS_FILE
    now = time.time()
    with db.session() as session:
        if session.get(Meta, SEEDED) is not None:
            return read_tokens(tokens_path)
        if session.scalar(select(NodeRow.id).limit(1)) is None:
            register_demo_fleet(session, now)
        tenants = {spec.name: ensure_tenant(session, spec, now) for spec in TENANTS}
        put_objects(session, governance_changes(tenants), now, source="demo", by_provider=True)
        users = create_users(session, tenants, now)
        session.add(Meta(key=SEEDED, value=str(now)))
        session.flush()
        write_tokens(tokens_path, users)  # before the commit: a failed write seeds nothing
    return users


def register_demo_fleet(session: Session, now: float) -> None:
    source = resources.files("gpuaas.supply").joinpath(SERVICE_DEMO_FLEET)
    inventory = parse_yaml(source.read_text(encoding="utf-8"), SERVICE_DEMO_FLEET)
    register_nodes(session, list(inventory["nodes"]), now, inventory.get("defaults"))


def tenant_capacity(spec: DemoTenant) -> dict[str, dict[str, str]]:
    """What the provider gives the tenant: exactly the nominal quota of its ClusterQueues."""
    return _terms(spec, 0)


def tenant_borrowing(spec: DemoTenant) -> dict[str, dict[str, str]]:
    """What the provider lets the tenant borrow in ``demo-cloud``, flavor by resource."""
    return _terms(spec, 1)


def _terms(spec: DemoTenant, index: int) -> dict[str, dict[str, str]]:
    terms: dict[str, dict[str, str]] = {}
    for queue in spec.queues:
        per = terms.setdefault(queue.flavor, {})
        for resource, amounts in queue.quota.items():
            per[resource] = str(amounts[index])
    return terms


def ensure_tenant(session: Session, spec: DemoTenant, now: float) -> Tenant:
    """The tenant with the provider's terms: its grant, its root cohort under ``demo-cloud``
    and its borrowing limits there (the root cohort itself is derived when the governance
    objects are stored)."""
    tenant = session.scalar(select(Tenant).where(Tenant.name == spec.name))
    if tenant is None:
        tenant = Tenant(name=spec.name, created_at=now)
        session.add(tenant)
    tenant.display_name = spec.display_name
    tenant.capacity = tenant_capacity(spec)
    tenant.parent_cohort = COHORT
    tenant.borrowing = tenant_borrowing(spec)
    session.flush()
    return tenant


def cluster_queue_name(tenant: str, queue: Queue) -> str:
    return f"{tenant}-{queue.local}"


def cluster_queue_document(tenant: str, queue: Queue) -> dict[str, Any]:
    resources = [{"name": name, "nominalQuota": queue.quota[name][0]} for name in queue.resources]
    spec = {
        "cohortName": tenant,  # the tenant's root cohort
        "queueingStrategy": "BestEffortFIFO",
        "preemption": {"withinClusterQueue": "LowerPriority", "reclaimWithinCohort": "Any"},
        "resourceGroups": [
            {
                "coveredResources": list(queue.resources),
                "flavors": [{"name": queue.flavor, "resources": resources}],
            }
        ],
    }
    return document("ClusterQueue", cluster_queue_name(tenant, queue), {"spec": spec})


Change = tuple[dict[str, Any], int | None, dict[str, Any] | None]


def governance_changes(tenants: Mapping[str, Tenant]) -> list[Change]:
    """Every governance object of the demo, with its owner (None: the provider)."""
    changes: list[Change] = []
    for flavor, (pool, tolerations) in FLAVORS.items():
        spec: dict[str, Any] = {"nodeLabels": {"gpuaas.io/pool": pool}}
        if tolerations:
            spec["tolerations"] = tolerations
        changes.append((document("ResourceFlavor", flavor, {"spec": spec}), None, None))
    changes.append((document("Cohort", COHORT, {"spec": {}}), None, None))
    for name, (value, description) in PRIORITY_CLASSES.items():
        body = {"value": value, "description": description}
        changes.append((document("WorkloadPriorityClass", name, body), None, None))
    acme = tenants["acme-ai"]
    release = {"value": 800, "description": "ACME's release-candidate training runs"}
    changes.append((document("WorkloadPriorityClass", "release", release), acme.id, None))
    for spec_tenant in TENANTS:
        tenant = tenants[spec_tenant.name]
        for queue in spec_tenant.queues:
            changes.append((cluster_queue_document(tenant.name, queue), tenant.id, None))
            lq = document(
                "LocalQueue",
                queue.local,
                {"spec": {"clusterQueue": cluster_queue_name(tenant.name, queue)}},
                tenant.name,
            )
            changes.append((lq, tenant.id, {"userLimit": 8} if queue.local == "h100" else None))
    for name, (display, local, allowed, ranges) in HARDWARE_PROFILES.items():
        spec = {
            "displayName": display,
            "localQueue": local,
            "allowedTenants": allowed,
            "resources": ranges,
        }
        changes.append((document("HardwareProfile", name, {"spec": spec}), None, None))
    return changes


def _user(session: Session, name: str, display: str, now: float) -> User:
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        user = User(name=name, display_name=display, created_at=now)
        session.add(user)
        session.flush()
    return user


def _grant(session: Session, user: User, tenant_id: int | None, role: Role, now: float) -> str:
    """Give ``user`` the role (replacing one it had there) and a new token; returns the token."""
    membership = session.scalar(
        select(Membership).where(Membership.user_id == user.id, Membership.tenant_id == tenant_id)
    )
    if membership is None:
        membership = Membership(user_id=user.id, tenant_id=tenant_id, created_at=now)
        session.add(membership)
    membership.role = role.value
    session.flush()
    _, secret = mint_token(session, user.id, "demo", scope_of([membership]), now)
    return secret


def create_users(session: Session, tenants: Mapping[str, Tenant], now: float) -> list[DemoUser]:
    out = []
    for spec in TENANTS:
        tenant = tenants[spec.name]
        for name, display, role in spec.users:
            token = _grant(session, _user(session, name, display, now), tenant.id, role, now)
            out.append(DemoUser(name, tenant.name, role.value, token))
    name, display = PLATFORM_VIEWER
    token = _grant(session, _user(session, name, display, now), None, Role.VIEWER, now)
    out.append(DemoUser(name, None, Role.VIEWER.value, token))
    session.flush()
    return out


def write_tokens(path: Path, users: list[DemoUser]) -> None:
    """Write the tokens file readable by its owner only (replacing an older one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    temporary.unlink(missing_ok=True)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump({"users": [asdict(user) for user in users]}, handle, indent=2)
        handle.write("\n")
    os.replace(temporary, path)


def read_tokens(path: Path) -> list[DemoUser]:
    try:
        data = json.loads(path.read_text())
        return [DemoUser(**entry) for entry in data["users"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


# --- the stream of jobs -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobTemplate:
    """One kind of job a demo tenant runs; ``duration`` is sampled in ``durations`` (seconds)."""

    tenant: str
    user: str
    spec: Mapping[str, Any]
    durations: tuple[float, float]

    @property
    def queue(self) -> str:
        """The LocalQueue it goes to: the spec's, or its first hardware profile's."""
        if "queue" in self.spec:
            return str(self.spec["queue"])
        profile = next(
            ps["hardwareProfile"] for ps in self.spec["podSets"] if "hardwareProfile" in ps
        )
        return HARDWARE_PROFILES[profile][1]


def _pods(name: str, count: int, profile: str | None = None, **fields: Any) -> dict[str, Any]:
    pod_set: dict[str, Any] = {"name": name, "count": count, **fields}
    if profile is not None:
        pod_set["hardwareProfile"] = profile
    return pod_set


TRAINER = {"image": "nvcr.io/nvidia/pytorch:24.05-py3"}
TEMPLATES: tuple[JobTemplate, ...] = (
    JobTemplate(
        "acme-ai",
        "arjun",
        {
            "name": "llama-70b-pretrain",
            "kind": "training",
            "priorityClass": "high",
            "container": {**TRAINER, "command": ["torchrun", "train.py", "--model", "llama-70b"]},
            "podSets": [_pods("workers", 4, "h100-8x", topology={"level": "nvlink"})],
        },
        (120, 600),
    ),
    JobTemplate(
        "acme-ai",
        "arjun",
        {
            "name": "mistral-7b-finetune",
            "kind": "training",
            "priorityClass": "normal",
            "container": {**TRAINER, "command": ["python", "finetune.py", "--lora"]},
            "podSets": [_pods("trainer", 1, "h100-1x", resources={"nvidia.com/gpu": 4})],
        },
        (60, 300),
    ),
    JobTemplate(
        "acme-ai",
        "alice",
        {
            "name": "eval-sweep",
            "kind": "batch",
            "priorityClass": "preemptible",
            "script": "python eval.py --suite mmlu --shard $SHARD",
            "podSets": [_pods("shards", 6, "l40s-quarter")],
        },
        (30, 180),
    ),
    JobTemplate(
        "acme-ai",
        "arjun",
        {
            "name": "jupyter",
            "kind": "notebook",
            "priorityClass": "normal",
            "queue": "l40s",
            "container": {"image": "quay.io/jupyter/pytorch-notebook:latest"},
            "podSets": [_pods("notebook", 1, "l40s-quarter")],
        },
        (120, 900),
    ),
    JobTemplate(
        "globex-research",
        "gus",
        {
            "name": "cfd-les-mpi",
            "kind": "mpi",
            "queue": "h100",
            "priorityClass": "normal",
            "command": ["mpirun", "-np", "16", "./les_solver", "case.cfg"],
            "podSets": [
                _pods(
                    "ranks",
                    2,
                    None,
                    resources={"nvidia.com/gpu": 8, "cpu": "96", "memory": "1Ti"},
                    topology={"level": "rack", "mode": "preferred"},
                )
            ],
        },
        (90, 600),
    ),
    JobTemplate(
        "globex-research",
        "gus",
        {
            "name": "md-gromacs",
            "kind": "mpi",
            "priorityClass": "high",
            "command": ["mpirun", "gmx_mpi", "mdrun", "-s", "topol.tpr"],
            "podSets": [_pods("ranks", 1, "h100-1x", resources={"nvidia.com/gpu": 2})],
        },
        (60, 400),
    ),
    JobTemplate(
        "globex-research",
        "gina",
        {
            "name": "preprocess-climate",
            "kind": "batch",
            "priorityClass": "normal",
            "script": "python regrid.py --year $SHARD",
            "podSets": [_pods("shards", 4, "cpu-large")],
        },
        (30, 240),
    ),
    JobTemplate(
        "initech-apps",
        "isla",
        {
            "name": "chat-api",
            "kind": "inference",
            "priorityClass": "production",
            "container": {"image": "vllm/vllm-openai:latest", "args": ["--model", "phi-3-mini"]},
            "podSets": [_pods("replicas", 6, "a100-mig-1g")],
        },
        (120, 900),
    ),
    JobTemplate(
        "initech-apps",
        "isla",
        {
            "name": "embeddings",
            "kind": "inference",
            "priorityClass": "production",
            "container": {"image": "ghcr.io/huggingface/text-embeddings-inference:latest"},
            "podSets": [_pods("replicas", 2, "a100-mig-3g")],
        },
        (120, 900),
    ),
    JobTemplate(
        "initech-apps",
        "ivan",
        {
            "name": "ocr-batch",
            "kind": "batch",
            "priorityClass": "preemptible",
            "command": ["python", "-m", "ocr.batch", "--input", "s3://initech/scans"],
            "podSets": [_pods("workers", 8, "l40s-quarter")],
        },
        (30, 180),
    ),
)


#: Seconds a stand-in sleeps at most: a laptop keeps a few dozen processes, not hundreds.
STAND_IN_MAX = 30


def stand_in(document: Mapping[str, Any], speed: float) -> dict[str, Any]:
    """``document`` as a script a host without GPUs can run (see the module docstring)."""
    out = {k: v for k, v in document.items() if k not in ("container", "command", "script")}
    if "container" in document:
        c = document["container"]
        what = f"{c['image']}: {' '.join([*c.get('command', []), *c.get('args', [])])}"
    else:
        script = str(document.get("script") or "").strip().splitlines()
        what = " ".join(document.get("command") or script[-1:] or ["a script"])
    seconds = max(1, min(STAND_IN_MAX, round(float(document.get("duration", 60)) / speed)))
    out["script"] = (
        f"echo 'demo stand-in for {what.replace(chr(39), '')}'\n"
        'echo "rank ${RANK:-0} of ${WORLD_SIZE:-1} on devices ${CUDA_VISIBLE_DEVICES:-none}"\n'
        f"exec sleep {seconds}\n"
    )
    return out


class JobStream:
    """Submits the demo's jobs: :meth:`submit_next` one at a time (tests drive it), or a daemon
    thread every ``settings.demo_job_interval`` seconds after :meth:`start` until :meth:`stop`."""

    def __init__(self, db: Database, settings: Settings, seed: int | None = None) -> None:
        self.db = db
        self.interval = settings.demo_job_interval
        self.stand_ins = settings.backend == "local"
        self.speed = settings.speed
        self.random = random.Random(seed)
        self.position = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def submit_next(self, now: float) -> Job | None:
        """Submit the next template's job; None when its queue is full."""
        template = TEMPLATES[self.position % len(TEMPLATES)]
        self.position += 1
        with self.db.session() as session:
            tenant = session.scalar(select(Tenant).where(Tenant.name == template.tenant))
            user = session.scalar(select(User.id).where(User.name == template.user))
            if tenant is None or user is None:  # the demo tenant or user was deleted
                return None
            pending = session.scalar(
                select(func.count())
                .select_from(Job)
                .where(
                    Job.tenant_id == tenant.id,
                    Job.local_queue == template.queue,
                    Job.state == JobState.PENDING.value,
                )
            )
            if (pending or 0) >= MAX_PENDING_PER_QUEUE:
                return None
            low, high = template.durations
            document = {**template.spec, "duration": round(self.random.uniform(low, high))}
            if self.stand_ins:
                document = stand_in(document, self.speed)
            spec = JobSpec.model_validate(document)
            job, _ = submit_job(session, tenant, user, spec, now)
            return job

    def start(self) -> None:
        """Submit one job of every kind at once (so the demo has work to show), then keep going."""
        if self._thread is not None or self.interval <= 0:
            return
        self._thread = threading.Thread(target=self._run, name="gpuaas-demo-jobs", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        for _ in range(len(TEMPLATES)):
            if self._stop.is_set():
                return
            self._submit_safely()
        while not self._stop.wait(self.interval):
            self._submit_safely()

    def _submit_safely(self) -> None:
        """A failed submission (say, a tenant admin changed the demo's queues) is logged and the
        stream goes on: the demo is there to be played with."""
        try:
            self.submit_next(time.time())
        except Exception:
            log.exception("demo job submission failed")
