"""What a server is started with; every field has a default that runs on a laptop."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gpuaas.model.errors import InvalidValue

DEFAULT_DATA_DIR = Path(os.environ.get("GPUAAS_DATA_DIR", "~/.local/share/gpuaas")).expanduser()


def _env_int(name: str, default: int) -> int:
    """An integer setting from the environment; a bad value is refused by name at start."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidValue(name, f"expected a whole number, got {raw!r}") from None
    if value < 0:
        raise InvalidValue(name, f"must not be negative, got {value}")
    return value


@dataclass(slots=True)
class Settings:
    """``db_url`` None means SQLite at ``data_dir/gpuaas.db``.

    ``fleet``: a fleet file (any format ``gpuaas fleet show`` reads) whose nodes are registered
    at first start; ``catalogue``: a GPU catalogue file that adds the provider's own models
    (default ``GPUAAS_CATALOGUE``); ``demo``: the demo
    fleet, tenants and a background stream of jobs. ``speed``: simulated jobs run this many times
    faster than their declared duration. ``backend``: the backend that runs jobs on nodes that
    name none (``sim``, ``local``, ``slurm``); ``container_runtime``: what runs containers on the
    local backend (``GPUAAS_CONTAINER_RUNTIME``). ``reconcile_interval``: seconds between reconciler
    passes. ``max_body_bytes``: larger request bodies get 413. ``metrics_token``: when set,
    ``/metrics`` answers only a scraper that presents it as a bearer token (tenant and queue
    names are in the series); unset, anyone who reaches the port may scrape.

    ``slurm_*`` (environment ``GPUAAS_SLURM_*``) say where the Slurm backend finds Slurm:
    slurmrestd's unix ``socket`` or ``url`` with ``user`` and JWT ``token`` (neither: the Slurm
    commands only), the ``conf`` file the commands read (``SLURM_CONF``), the ``partition`` to
    submit to (unset: the first partition holding the job's nodes), the ``state_dir`` where
    it keeps which Slurm job runs which gpuaas job (default ``data_dir/slurm``), and
    ``nic_gres``, NIC pools mapped to the gres the cluster counts them as
    (``openshift.io/mlnx_ib=nic``; unset: Slurm is not asked for NICs), ``dataset_cache`` the
    dataset cache directory on each node's local disk (default ``/var/cache/gpuaas/datasets``) and
    ``dataset_command`` the program the jobs that fill and check it run on the node
    (docs/datasets.md).

    Storage (docs/storage.md): ``storage_enforcement`` how local volumes' sizes are enforced
    (``measure``, ``image``: loop-mounted ext4 images, needs root, or ``auto``;
    ``GPUAAS_STORAGE_ENFORCEMENT``); ``nfs_*`` the provider's NFS server, the export root on it,
    the ``/etc/exports`` clients of the job hosts and where they mount volumes (the ``nfs`` class
    is offered when server and clients are set; ``GPUAAS_NFS_*``); ``kube_storage_classes`` the
    Kubernetes StorageClasses offered as classes of PVC volumes (``GPUAAS_KUBE_STORAGE_CLASSES``,
    comma-separated).

    Telemetry (docs/telemetry.md): ``telemetry_window`` the rolling window's length in seconds
    (``GPUAAS_TELEMETRY_WINDOW``), ``telemetry_stale_after`` after how many seconds without a
    sample a window reads unknown, ``telemetry_interval`` how often the reconciler feeds it,
    ``telemetry_scrape_interval`` / ``telemetry_scrape_timeout`` how often and how patiently
    the nodes' dcgm-exporters are scraped.
    """

    db_url: str | None = None
    data_dir: Path = DEFAULT_DATA_DIR
    fleet: Path | None = None
    catalogue: Path | None = field(
        default_factory=lambda: (
            Path(os.environ["GPUAAS_CATALOGUE"]) if os.environ.get("GPUAAS_CATALOGUE") else None
        )
    )
    demo: bool = False
    #: the backend of nodes that name none (see :mod:`gpuaas.service.backends`)
    backend: str = field(default_factory=lambda: os.environ.get("GPUAAS_BACKEND") or "sim")
    #: the program that runs ``container`` jobs on the local backend (``docker``, ``podman``);
    #: unset, the local backend rejects them
    container_runtime: str | None = field(
        default_factory=lambda: os.environ.get("GPUAAS_CONTAINER_RUNTIME") or None
    )
    host: str = "127.0.0.1"
    port: int = 8080
    speed: float = 1.0
    reconcile_interval: float = 0.5
    #: CPU seconds a new leader's step spends loading its pending backlog (service/backlog.py)
    backlog_budget: float = 1.0
    #: each node's dataset cache capacity in bytes (docs/datasets.md)
    dataset_cache_bytes: int = field(
        default_factory=lambda: int(os.environ.get("GPUAAS_DATASET_CACHE_BYTES") or 1 << 40)
    )
    max_body_bytes: int = 1 << 20
    #: ship the audit log as JSON lines to an HTTP endpoint and/or syslog (host:port or a
    #: socket path) as well as to its table (``GPUAAS_AUDIT_HTTP``, ``GPUAAS_AUDIT_SYSLOG``)
    audit_http: str | None = field(default_factory=lambda: os.environ.get("GPUAAS_AUDIT_HTTP"))
    audit_syslog: str | None = field(default_factory=lambda: os.environ.get("GPUAAS_AUDIT_SYSLOG"))
    #: requests a second per token and per tenant, and the failed-authentication back-off
    #: (:mod:`gpuaas.service.rate_limits`; ``GPUAAS_RATE_PER_TOKEN``, ``GPUAAS_RATE_PER_TENANT``,
    #: ``GPUAAS_AUTH_FREE_FAILURES``; 0 turns a rule off)
    rate_per_token: int = field(default_factory=lambda: _env_int("GPUAAS_RATE_PER_TOKEN", 2000))
    rate_per_tenant: int = field(default_factory=lambda: _env_int("GPUAAS_RATE_PER_TENANT", 5000))
    auth_free_failures: int = field(
        default_factory=lambda: _env_int("GPUAAS_AUTH_FREE_FAILURES", 10)
    )
    #: pods a tenant's jobs may have tried per admission cycle before its other jobs wait for
    #: the next cycle (``CycleBudgetSpent``; its first job of a cycle is always tried): one
    #: tenant's huge gangs cannot hold up the others' (``GPUAAS_ADMISSION_PODS_PER_CYCLE``,
    #: 0 turns it off)
    admission_pods_per_cycle: int = field(
        default_factory=lambda: _env_int("GPUAAS_ADMISSION_PODS_PER_CYCLE", 4000)
    )
    #: write usage records at job transitions (docs/billing.md); ``GPUAAS_METERING=0`` or
    #: ``gpuaas serve --no-metering`` turn it off (to measure what it costs)
    metering: bool = field(
        default_factory=lambda: (
            os.environ.get("GPUAAS_METERING", "1").lower() not in ("0", "false", "no", "off")
        )
    )
    #: FastAPI's native OpenTelemetry (spans, metrics and logs of each request, sent to the
    #: globally configured providers, e.g. by ``opentelemetry-instrument``); off unless
    #: ``GPUAAS_OPENTELEMETRY=1``, because even unconfigured it asks on every request whether a
    #: provider has appeared, 2-3 % of a submission's CPU (docs/benchmarks.md)
    opentelemetry: bool = field(
        default_factory=lambda: (
            os.environ.get("GPUAAS_OPENTELEMETRY", "0").lower() in ("1", "true", "yes", "on")
        )
    )
    reconcile: bool = True
    #: run the reconciler in a child process (``gpuaas serve``) rather than a thread
    reconciler_process: bool = False
    admin_token: str | None = field(default_factory=lambda: os.environ.get("GPUAAS_ADMIN_TOKEN"))
    demo_job_interval: float = 2.0
    metrics_token: str | None = field(
        default_factory=lambda: os.environ.get("GPUAAS_METRICS_TOKEN") or None
    )
    #: the kubernetes backend (docs/kubernetes.md): kubeconfig file (unset: in-cluster config,
    #: else ~/.kube/config), its context, the tenant namespace pattern, the target scheduler
    #: (kueue, volcano, kai) and the image a job without a container runs its command in
    kube_config: str | None = field(default_factory=lambda: os.environ.get("GPUAAS_KUBE_CONFIG"))
    kube_context: str | None = field(
        default_factory=lambda: os.environ.get("GPUAAS_KUBE_CONTEXT") or None
    )
    kube_namespace: str = field(
        default_factory=lambda: os.environ.get("GPUAAS_KUBE_NAMESPACE") or "gpuaas-{tenant}"
    )
    kube_target: str = field(
        default_factory=lambda: os.environ.get("GPUAAS_KUBE_TARGET") or "kueue"
    )
    kube_base_image: str = field(
        default_factory=lambda: (
            os.environ.get("GPUAAS_KUBE_BASE_IMAGE") or "docker.io/library/ubuntu:24.04"
        )
    )

    #: tenant Kubernetes clusters (docs/cluster-api.md): the Cluster API management cluster's
    #: kubeconfig (unset: objects are only printed, ``gpuaas clusters manifest``), its context
    #: and the namespace the clusters' objects live in
    capi_kubeconfig: str | None = field(default_factory=lambda: _env("GPUAAS_CAPI_KUBECONFIG"))
    capi_context: str | None = field(default_factory=lambda: _env("GPUAAS_CAPI_CONTEXT"))
    capi_namespace: str = field(
        default_factory=lambda: _env("GPUAAS_CAPI_NAMESPACE") or "gpuaas-clusters"
    )

    slurm_socket: str | None = field(default_factory=lambda: _env("GPUAAS_SLURM_SOCKET"))
    slurm_url: str | None = field(default_factory=lambda: _env("GPUAAS_SLURM_URL"))
    slurm_user: str | None = field(default_factory=lambda: _env("GPUAAS_SLURM_USER"))
    slurm_token: str | None = field(default_factory=lambda: _env("GPUAAS_SLURM_TOKEN"))
    slurm_conf: str | None = field(default_factory=lambda: _env("GPUAAS_SLURM_CONF"))
    slurm_partition: str | None = field(default_factory=lambda: _env("GPUAAS_SLURM_PARTITION"))
    #: NIC pool -> Slurm gres name, ``pool=gres,...`` (see gpuaas.backends.slurm.script)
    slurm_nic_gres: str | None = field(default_factory=lambda: _env("GPUAAS_SLURM_NIC_GRES"))
    slurm_state_dir: Path | None = field(
        default_factory=lambda: (
            Path(os.environ["GPUAAS_SLURM_STATE_DIR"])
            if os.environ.get("GPUAAS_SLURM_STATE_DIR")
            else None
        )
    )
    #: each Slurm node's dataset cache, on its local disk (gpuaas.backends.slurm.datasets)
    slurm_dataset_cache: str | None = field(
        default_factory=lambda: _env("GPUAAS_SLURM_DATASET_CACHE")
    )
    #: the command the node jobs run (default: this Python, ``-m gpuaas.backends.dataset_cache``)
    slurm_dataset_command: str | None = field(
        default_factory=lambda: _env("GPUAAS_SLURM_DATASET_COMMAND")
    )

    storage_enforcement: str = field(
        default_factory=lambda: _env("GPUAAS_STORAGE_ENFORCEMENT") or "measure"
    )
    nfs_server: str | None = field(default_factory=lambda: _env("GPUAAS_NFS_SERVER"))
    nfs_export_root: str = field(
        default_factory=lambda: _env("GPUAAS_NFS_EXPORT_ROOT") or "/exports/gpuaas"
    )
    nfs_clients: str | None = field(default_factory=lambda: _env("GPUAAS_NFS_CLIENTS"))
    nfs_mount_root: str = field(
        default_factory=lambda: _env("GPUAAS_NFS_MOUNT_ROOT") or "/mnt/gpuaas"
    )
    kube_storage_classes: tuple[str, ...] = field(
        default_factory=lambda: tuple(
            c.strip() for c in (_env("GPUAAS_KUBE_STORAGE_CLASSES") or "").split(",") if c.strip()
        )
    )
    telemetry_window: float = field(
        default_factory=lambda: float(_env("GPUAAS_TELEMETRY_WINDOW") or 300.0)
    )
    telemetry_stale_after: float = 60.0
    telemetry_interval: float = 5.0
    telemetry_scrape_interval: float = 15.0
    telemetry_scrape_timeout: float = 5.0

    @property
    def logs_dir(self) -> Path:
        """Where jobs' output is kept (:class:`~gpuaas.backends.logs.LogLayout`'s root)."""
        return self.data_dir / "logs"

    @property
    def url(self) -> str:
        if self.db_url:
            return self.db_url
        return f"sqlite:///{self.data_dir / 'gpuaas.db'}"


def _env(name: str) -> str | None:
    return os.environ.get(name) or None
