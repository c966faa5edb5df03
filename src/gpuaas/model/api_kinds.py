"""The governance kinds of the REST API, one declaration each: the one resource table.

Datasets (a tenant's registered data, :mod:`gpuaas.service.datasets`) are served from the
same table: the same five verbs, routes, SDK methods and CLI group.

Every governance kind (flavors, cohorts, cluster queues, local queues, priority classes,
hardware profiles), and a tenant's volumes, is served, called and typed the same way: five
verbs (list, get, create, update = replace, delete) under ``/v1/<path>`` for the provider and/or
``/v1/tenants/{tenant}/<path>`` for a tenant. Before this table each kind x scope x verb was
written by hand in the router, again in the SDK and again in the CLI, and the copies drifted (the
CLI lacked verbs). Now the router (``service/routers/governance.py``), the SDK
(``client/sdk.py``) and the CLI (``cli/client_governance.py``) are generated from
:data:`KINDS`; adding a kind is one :class:`ApiKind` entry here plus its service class.

The table is plain data so that the SDK and the CLI import it without the server: request and
view models and the service class are named as ``"module:attribute"`` and only the service
resolves them (a test checks that they resolve and that the table, the OpenAPI document, the SDK
and the CLI agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Scope = Literal["provider", "tenant"]
Verb = Literal["list", "get", "create", "update", "delete"]
VERBS: tuple[Verb, ...] = ("list", "get", "create", "update", "delete")

#: the HTTP method and success status of each verb (``update`` replaces the object: PUT)
METHODS: dict[Verb, tuple[str, int]] = {
    "list": ("GET", 200),
    "get": ("GET", 200),
    "create": ("POST", 201),
    "update": ("PUT", 200),
    "delete": ("DELETE", 204),
}

_MODELS = "gpuaas.service.models.governance"
_SERVICE = "gpuaas.service.governance_kinds"
_DATASETS = "gpuaas.service.models.datasets"
_SPECS = "gpuaas.service.models.kueue_specs"


@dataclass(frozen=True, slots=True)
class BodyField:
    """A field of the kind's request body besides ``name``, as the SDK and the CLI pass it.

    ``api``: its camelCase name in JSON; ``python``: the SDK keyword and CLI option
    (``--cluster-queue``); ``type``: ``spec`` (a mapping, read from ``-f FILE``), ``str`` or
    ``int``; ``scope``: only on this scope's routes (the provider names a cluster queue's owner)."""

    api: str
    python: str
    type: Literal["spec", "str", "int"]
    help: str
    required: bool = False
    scope: Scope | None = None
    short: str | None = None  # the CLI option's short form, e.g. -c


@dataclass(frozen=True, slots=True)
class Column:
    """A column of the CLI's table: the first of ``paths`` (dotted) present in an item, shown
    with the CLI formatter named ``fmt`` (``cell``, ``labels``, ``quotas``, ``ranges``)."""

    header: str
    paths: tuple[str, ...]
    fmt: str = "cell"


SPEC = BodyField("spec", "spec", "spec", "the Kueue spec (from -f FILE)")


@dataclass(frozen=True, slots=True)
class ApiKind:
    """One governance kind of the API.

    ``kind``: the Kueue kind stored; ``path``: the URL segment; ``cli``: the CLI group;
    ``singular``/``plural``: SDK method names (``get_<singular>``, ``list_<plural>``);
    ``scopes``: which route families exist; ``provider_read``: who may read the provider routes
    (``authenticated``: anyone with a token; ``platform``: platform roles); ``request`` /
    ``view``: the pydantic models (``provider_request`` overrides ``request`` on the provider
    routes; by default a ``{name, spec}`` body and view); ``service``: the class doing each
    verb (:mod:`gpuaas.service.governance_kinds`); ``fields``: the body's fields besides
    ``name``; ``filters``: query parameters of the provider list; ``columns``: the CLI table."""

    kind: str
    path: str
    cli: str
    singular: str
    plural: str
    help: str
    scopes: tuple[Scope, ...]
    service: str
    columns: tuple[Column, ...]
    provider_read: Literal["authenticated", "platform"] = "authenticated"
    request: str = f"{_MODELS}:ObjectIn"
    view: str = f"{_MODELS}:ObjectOut"
    fields: tuple[BodyField, ...] = (SPEC,)
    provider_request: str | None = None
    filters: tuple[BodyField, ...] = ()
    verbs: tuple[Verb, ...] = VERBS

    def request_for(self, scope: Scope) -> str:
        return (self.provider_request or self.request) if scope == "provider" else self.request

    def fields_for(self, scope: Scope) -> tuple[BodyField, ...]:
        return tuple(f for f in self.fields if f.scope in (None, scope))

    def route(self, scope: Scope, one: bool) -> str:
        """The route's path template, as the OpenAPI document spells it."""
        base = f"/v1/{self.path}" if scope == "provider" else f"/v1/tenants/{{tenant}}/{self.path}"
        return f"{base}/{{name}}" if one else base


NAME = Column("NAME", ("name",))
OWNER = Column("TENANT", ("tenant",))

KINDS: tuple[ApiKind, ...] = (
    ApiKind(
        kind="ResourceFlavor",
        path="flavors",
        cli="flavors",
        singular="flavor",
        plural="flavors",
        help="ResourceFlavors: kinds of capacity, mapped to node labels.",
        scopes=("provider",),
        request=f"{_MODELS}:FlavorIn",
        service=f"{_SERVICE}:Flavors",
        columns=(
            NAME,
            Column("NODE LABELS", ("spec.nodeLabels",), "labels"),
            Column("TAINTS", ("spec.nodeTaints",)),
            Column("TOLERATIONS", ("spec.tolerations",)),
        ),
    ),
    ApiKind(
        kind="Cohort",
        path="cohorts",
        cli="cohorts",
        singular="cohort",
        plural="cohorts",
        help="Cohorts: trees of cluster queues that lend and borrow (--tenant: a tenant's own).",
        scopes=("provider", "tenant"),
        request=f"{_SPECS}:CohortIn",
        service=f"{_SERVICE}:Cohorts",
        columns=(
            NAME,
            OWNER,
            Column("PARENT", ("spec.parentName", "spec.parent")),
            Column("QUOTA (+BORROWING LIMIT)", ("spec.resourceGroups",), "quotas"),
        ),
    ),
    ApiKind(
        kind="ClusterQueue",
        path="cluster-queues",
        cli="cluster-queues",
        singular="cluster_queue",
        plural="cluster_queues",
        help="ClusterQueues: quota per flavor and resource (--tenant: a tenant admin's own).",
        scopes=("provider", "tenant"),
        provider_read="platform",
        request=f"{_SPECS}:TenantClusterQueueIn",
        provider_request=f"{_SPECS}:ProviderClusterQueueIn",
        view=f"{_MODELS}:ClusterQueueOut",
        service=f"{_SERVICE}:ClusterQueues",
        fields=(
            SPEC,
            BodyField("tenant", "owner", "str", "the tenant that owns it", scope="provider"),
        ),
        filters=(BodyField("tenant", "owner", "str", "only the queues this tenant owns"),),
        columns=(
            NAME,
            OWNER,
            Column("COHORT", ("spec.cohortName", "spec.cohort")),
            Column("QUOTA (+BORROWING LIMIT)", ("spec.resourceGroups",), "quotas"),
            Column("PENDING", ("status.pendingWorkloads",)),
            Column("ADMITTED", ("status.admittedWorkloads",)),
        ),
    ),
    ApiKind(
        kind="LocalQueue",
        path="local-queues",
        cli="queues",
        singular="local_queue",
        plural="local_queues",
        help="A tenant's LocalQueues: where its users submit jobs.",
        scopes=("tenant",),
        provider_read="platform",
        request=f"{_MODELS}:LocalQueueIn",
        view=f"{_MODELS}:LocalQueueOut",
        service=f"{_SERVICE}:LocalQueues",
        fields=(
            BodyField(
                "clusterQueue",
                "cluster_queue",
                "str",
                "the ClusterQueue it feeds",
                required=True,
                short="-c",
            ),
            BodyField("userLimit", "user_limit", "int", "most admitted jobs per user"),
        ),
        columns=(
            NAME,
            Column("CLUSTER QUEUE", ("clusterQueue",)),
            Column("USER LIMIT", ("userLimit",)),
            Column("PENDING", ("pending",)),
            Column("ADMITTED", ("admitted",)),
            Column("RUNNING", ("running",)),
        ),
    ),
    ApiKind(
        kind="WorkloadPriorityClass",
        path="priority-classes",
        cli="priority-classes",
        singular="priority_class",
        plural="priority_classes",
        help="WorkloadPriorityClasses: global, and a tenant's own (--tenant).",
        scopes=("provider", "tenant"),
        request=f"{_MODELS}:PriorityClassIn",
        view=f"{_MODELS}:PriorityClassOut",
        service=f"{_SERVICE}:PriorityClasses",
        fields=(
            BodyField("value", "value", "int", "higher is admitted (and kept) first", True),
            BodyField("description", "description", "str", "what the class is for"),
        ),
        columns=(
            NAME,
            Column("VALUE", ("value",)),
            OWNER,
            Column("DESCRIPTION", ("description",)),
        ),
    ),
    ApiKind(
        kind="HardwareProfile",
        path="hardware-profiles",
        cli="profiles",
        singular="hardware_profile",
        plural="hardware_profiles",
        help="Hardware profiles: the catalogue users pick from (--tenant: as a tenant sees it).",
        scopes=("provider", "tenant"),
        provider_read="platform",
        request=f"{_SPECS}:HardwareProfileIn",
        service=f"{_SERVICE}:HardwareProfiles",
        columns=(
            NAME,
            Column("DISPLAY NAME", ("spec.displayName",)),
            Column("LOCAL QUEUE", ("spec.localQueue",)),
            Column("RESOURCES: DEFAULT [MIN-MAX]", ("spec.resources",), "ranges"),
            Column("OWNER", ("tenant",)),
        ),
    ),
    ApiKind(
        kind="Volume",
        path="volumes",
        cli="volumes",
        singular="volume",
        plural="volumes",
        help="A tenant's volumes: storage jobs mount by name (docs/storage.md).",
        scopes=("tenant",),
        request="gpuaas.service.models.storage:VolumeIn",
        view="gpuaas.service.models.storage:VolumeOut",
        service="gpuaas.service.storage:Volumes",
        fields=(
            BodyField("size", "size", "str", "bytes, as a quantity (100Gi)", required=True),
            BodyField(
                "storageClass",
                "storage_class",
                "str",
                "local (default), nfs, or a Kubernetes StorageClass the provider offers",
            ),
            BodyField(
                "accessMode",
                "access_mode",
                "str",
                "ReadWriteOnce (default), ReadWriteMany or ReadOnlyMany",
            ),
            BodyField("cluster", "cluster", "str", "the tenant's cluster it belongs to"),
        ),
        columns=(
            NAME,
            Column("SIZE", ("size",)),
            Column("CLASS", ("storageClass",)),
            Column("ACCESS", ("accessMode",)),
            Column("CLUSTER", ("cluster",)),
            Column("STATE", ("state",)),
            Column("USED", ("usedBytes",)),
            Column("REASON", ("reason.message",)),
        ),
    ),
    ApiKind(
        kind="Dataset",
        path="datasets",
        cli="datasets",
        singular="dataset",
        plural="datasets",
        help="A tenant's datasets and where they are warm (preload: warm them on nodes).",
        scopes=("tenant",),
        request=f"{_DATASETS}:DatasetIn",
        view=f"{_DATASETS}:DatasetOut",
        service="gpuaas.service.datasets:Datasets",
        fields=(
            BodyField(
                "uri",
                "uri",
                "str",
                "where it lives: s3://, hdfs://, nfs://, file:// or an absolute path",
                required=True,
            ),
            BodyField("size", "size", "str", "its size: bytes or a quantity (500Gi)"),
            BodyField("runtime", "runtime", "str", "cache runtime: alluxio, juicefs, jindo, thin"),
            BodyField("cacheSize", "cache_size", "str", "the cache per node (default: its size)"),
        ),
        columns=(
            NAME,
            Column("URI", ("uri",)),
            Column("SIZE", ("size",)),
            Column("RUNTIME", ("runtime",)),
            Column("WARM ON", ("warmNodes",)),
        ),
    ),
    ApiKind(
        kind="Budget",
        path="budgets",
        cli="budgets",
        singular="budget",
        plural="budgets",
        help="A tenant's budgets: amounts per period, alerts, hard holds, user rate caps.",
        scopes=("tenant",),
        request="gpuaas.service.models.budgets:BudgetIn",
        view="gpuaas.service.models.budgets:BudgetOut",
        service="gpuaas.service.budgets:Budgets",
        fields=(
            BodyField("scopeKind", "scope_kind", "str", "tenant (default), queue, cluster or user"),
            BodyField("scope", "scope", "str", "the queue, cluster or user (its name)"),
            BodyField("period", "period", "str", "monthly (default) or weekly"),
            BodyField("amount", "amount", "str", "the amount per period (decimal)"),
            BodyField("currency", "currency", "str", "its currency (default USD)"),
            BodyField("thresholds", "thresholds", "str", "soft alerts in % (50,80,100)"),
            BodyField("hard", "hard", "str", "true: hold the scope's new admissions once spent"),
            BodyField("stopRunning", "stop_running", "str", "true: stop running work too"),
            BodyField("maxRatePerHour", "max_rate_per_hour", "str", "a user's cost-rate cap"),
            BodyField("webhook", "webhook", "str", "an http(s) URL alerts are POSTed to"),
        ),
        columns=(
            NAME,
            Column("SCOPE", ("scopeKind",)),
            Column("OF", ("scope",)),
            Column("PERIOD", ("period",)),
            Column("AMOUNT", ("amount",)),
            Column("SPENT", ("status.spent",)),
            Column("FORECAST", ("status.forecast",)),
            Column("HARD", ("hard",)),
            Column("HOLDING", ("status.holding",)),
        ),
    ),
    ApiKind(
        kind="Price",
        path="prices",
        cli="prices",
        singular="price",
        plural="prices",
        help="The price book: the provider's prices (what tenants pay) and a tenant's "
        "chargeback prices for its users (--tenant); an entry that priced usage never changes.",
        scopes=("provider", "tenant"),
        request="gpuaas.service.models.billing:PriceIn",
        view="gpuaas.service.models.billing:PriceOut",
        service="gpuaas.service.prices:Prices",
        fields=(
            BodyField("sku", "sku", "str", "e.g. H100-80GB/whole@on-demand", required=True),
            BodyField(
                "listPerHour", "list_per_hour", "str", "list price per unit-hour", required=True
            ),
            BodyField(
                "contractedPerHour",
                "contracted_per_hour",
                "str",
                "price after discount (default: the list price)",
            ),
            BodyField("currency", "currency", "str", "ISO 4217 (default USD)"),
            BodyField("validFrom", "valid_from", "str", "POSIX seconds or ISO-8601", required=True),
            BodyField("validUntil", "valid_until", "str", "default: until the next entry"),
            BodyField("description", "description", "str", "what the price is"),
        ),
        filters=(BodyField("sku", "sku", "str", "only this SKU's entries"),),
        columns=(
            NAME,
            Column("SKU", ("sku",)),
            Column("LIST/H", ("listPerHour",)),
            Column("CONTRACTED/H", ("contractedPerHour",)),
            Column("CUR", ("currency",)),
            Column("FROM", ("validFrom",)),
            Column("UNTIL", ("validUntil",)),
            Column("USED", ("used",)),
        ),
    ),
)

#: the provider's idle-capacity pool (docs/idle-pool.md), after the tenants' kinds
KINDS += (
    ApiKind(
        kind="IdlePool",
        path="idle-pools",
        cli="pool",
        singular="idle_pool",
        plural="idle_pools",
        help="The provider's idle-capacity pool: idle nodes lent to a marketplace as spot.",
        scopes=("provider",),
        provider_read="platform",
        request="gpuaas.service.models.idle_pool:IdlePoolIn",
        view="gpuaas.service.models.idle_pool:IdlePoolOut",
        service="gpuaas.service.idle_pool:IdlePools",
        fields=(
            BodyField("tenant", "owner", "str", "the pool's own tenant (created if missing)"),
            BodyField("kind", "cluster_kind", "str", "baremetal (default), slurm or kubernetes"),
            BodyField("marketplace", "marketplace", "str", "the marketplace it is lent to"),
            BodyField("settleSeconds", "settle_seconds", "int", "idle seconds before a node joins"),
            BodyField("graceSeconds", "grace_seconds", "int", "a reclaim's grace, at least 30"),
            BodyField("maxNodes", "max_nodes", "int", "the most nodes it holds (0: no limit)"),
        ),
        columns=(
            NAME,
            Column("TENANT", ("tenant",)),
            Column("KIND", ("kind",)),
            Column("NODES", ("nodes",)),
            Column("GPUS", ("gpus",)),
            Column("RECLAIMING", ("reclaiming",)),
            Column("GRACE", ("graceSeconds",)),
            Column("STATE", ("state",)),
        ),
    ),
)

BY_CLI: dict[str, ApiKind] = {k.cli: k for k in KINDS}
BY_KIND: dict[str, ApiKind] = {k.kind: k for k in KINDS}
