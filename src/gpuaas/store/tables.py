"""The control plane's tables. Times are POSIX seconds (float), set by the service, never by
the database, so that SQLite and PostgreSQL store the same values.

Governance objects (flavors, cohorts, cluster queues, local queues, priority classes, hardware
profiles) are kept as their Kueue-shaped documents in one table: the Kueue loader validates them
and builds the engine's :class:`~gpuaas.model.governance.Governance`, so an object means the same
thing in the API, in an import, and to the engine.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAME = 253  # a Kubernetes object name's maximum length


class Base(DeclarativeBase):
    pass


class Meta(Base):
    """Facts about the installation itself (``bootstrapped``, ``fleet.loaded`` ...)."""

    __tablename__ = "meta"
    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Tenant(Base):
    """A customer or team; its name is the Kueue namespace of its LocalQueues.

    The provider's terms (:mod:`gpuaas.service.tenancy`): ``capacity``, the grant,
    ``{flavor: {resource: quantity}}``, held by the tenant's root cohort (named after the
    tenant); ``parent_cohort``, the provider Cohort that root hangs from (None: no borrowing or
    lending outside the tenant); ``borrowing`` and ``lending``, the root's borrowing and lending
    limits there; ``max_job``, the most a single job may ask for, ``{resource: quantity}``;
    ``priority_ceiling``, the highest value a tenant's own priority class may have (None: the
    provider's highest class); ``storage_quota``, the most bytes its volumes may hold together
    (None: no limit).
    """

    __tablename__ = "tenants"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(63), unique=True)
    display_name: Mapped[str] = mapped_column(String(200), default="")
    capacity: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    parent_cohort: Mapped[str | None] = mapped_column(String(NAME), nullable=True)
    borrowing: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    lending: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    max_job: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    priority_ceiling: Mapped[int | None] = mapped_column(Integer, nullable=True)
    storage_quota: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    display_name: Mapped[str] = mapped_column(String(200), default="")
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)


class Membership(Base):
    """A role of a user: in a tenant, or platform-wide (``tenant_id`` NULL: provider-admin or
    viewer of everything).

    An id is never used twice (SQLite ``AUTOINCREMENT``; SQLite would otherwise give a new row
    the id of the last one deleted): a token's scope names memberships by id, and a membership
    made after a removal must not be mistaken for the one a token was minted with.
    """

    __tablename__ = "memberships"
    __table_args__ = (
        UniqueConstraint("user_id", "tenant_id", name="uq_membership"),
        {"sqlite_autoincrement": True},
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    tenant_id: Mapped[int | None] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), nullable=True, index=True
    )
    role: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[float] = mapped_column(Float)


class Token(Base):
    """An API token; only its SHA-256 is kept (tokens are 256 random bits, so a fast hash is
    as safe as a slow one and keeps authentication off the request's critical path).

    ``scope`` is what the token may ever do: ``{membership id: highest role}``, fixed when it is
    minted. A request gets, for each membership named there that still exists, the lower of that
    role and the membership's role now; a membership the user gains later (or gets again after a
    removal: a new row, a new id) is never in it. ``tenant_id`` is set on a token minted in a
    tenant (its scope is that one membership): the tenant's admins list and revoke it, and it
    stops working when the member leaves the tenant.
    """

    __tablename__ = "tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    tenant_id: Mapped[int | None] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), nullable=True, index=True
    )
    scope: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    name: Mapped[str] = mapped_column(String(100), default="")
    #: the token's fingerprint (:func:`gpuaas.service.auth.fingerprint`), not a piece of it
    prefix: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)


class Invitation(Base):
    """A tenant-admin's offer of a role to a user that already exists: it becomes a membership
    only when the user (with a token of its own) or a provider-admin accepts it."""

    __tablename__ = "invitations"
    __table_args__ = (UniqueConstraint("tenant_id", "user_id", name="uq_invitation"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    role: Mapped[str] = mapped_column(String(32))
    invited_by: Mapped[str] = mapped_column(String(100), default="")
    created_at: Mapped[float] = mapped_column(Float)


class GovernanceObject(Base):
    """A Kueue-shaped object (``apiVersion``/``kind``/``metadata``/``spec``).

    ``namespace`` is the tenant for namespaced kinds (LocalQueue), "" otherwise; ``tenant_id``
    is the owning tenant of a tenant-managed object, NULL for the provider's. ``options`` holds
    gpuaas settings that have no Kueue field (a LocalQueue's per-user limit).
    """

    __tablename__ = "governance_objects"
    __table_args__ = (UniqueConstraint("kind", "namespace", "name", name="uq_governance_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(64))
    namespace: Mapped[str] = mapped_column(String(63), default="")
    name: Mapped[str] = mapped_column(String(NAME))
    tenant_id: Mapped[int | None] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), nullable=True, index=True
    )
    document: Mapped[dict[str, Any]] = mapped_column(JSON)
    options: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class NodeRow(Base):
    """A node of the fleet, as one entry of the inventory format (docs/inventory.md)."""

    __tablename__ = "nodes"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(NAME), unique=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    cordoned: Mapped[bool] = mapped_column(Boolean, default=False)
    draining: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class Job(Base):
    """A submitted job and its workload's admission state.

    ``placement`` lists the pods as admitted: ``[{podSet, index, node, assignment}]`` where
    ``assignment`` is the engine's exact device assignment, so a restart reserves the same
    devices again instead of placing anew. ``reason`` is the sentence a user reads;
    ``reason_code`` and ``reason_fields`` the same reason structured (a code of
    :class:`gpuaas.engine.reasons.Code` and ``{fields, causes}``; empty on rows written before
    reasons were structured).
    """

    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("tenant_id", "user_id", "idempotency_key", name="uq_job_idempotency"),
        Index("ix_jobs_tenant_id_id", "tenant_id", "id"),
        # a new leader pages its backlog in queue order (service/backlog.py); its leading
        # column also serves every question by state alone
        Index("ix_jobs_queue_order", "state", "priority", "created_at", "id"),
        # every reconcile step asks for cancel requests (rare): a partial index holds only
        # those, so a submission's insert writes no entry to it (migration 0017)
        Index(
            "ix_jobs_cancel_requested",
            "cancel_requested",
            sqlite_where=text("cancel_requested IS 1"),
            postgresql_where=text("cancel_requested IS true"),
        ),
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(NAME))
    kind: Mapped[str] = mapped_column(String(32))
    idempotency_key: Mapped[str | None] = mapped_column(String(200), nullable=True)
    local_queue: Mapped[str] = mapped_column(String(NAME))
    priority_class: Mapped[str | None] = mapped_column(String(NAME), nullable=True)
    priority: Mapped[int] = mapped_column(Integer, default=0)
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    reason_code: Mapped[str] = mapped_column(String(64), default="")
    reason_fields: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    cluster_queue: Mapped[str | None] = mapped_column(String(NAME), nullable=True)
    flavors: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    placement: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    gpus: Mapped[int] = mapped_column(Integer, default=0)  # milli-GPU held while admitted
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    admitted_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class JobEvent(Base):
    """One lifecycle transition of a job, with the reason a user can read."""

    __tablename__ = "job_events"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[float] = mapped_column(Float)
    from_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    #: the reason's code (:class:`gpuaas.engine.reasons.Code`); empty on events written before
    reason_code: Mapped[str] = mapped_column(String(64), default="", server_default="")


class VolumeRow(Base):
    """A tenant's volume (:mod:`gpuaas.model.volume`): its desired state (``size`` as written,
    ``size_bytes``, ``storage_class``, ``access_mode``, the ``cluster`` it belongs to, "" for
    none) and what its provisioner made of it (``state``, the reason, ``path`` on the job hosts,
    ``claim`` the PVC name, ``details``); ``metered_until``: see the column."""

    __tablename__ = "volumes"
    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_volume_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(63))
    cluster: Mapped[str] = mapped_column(String(63), default="")
    size: Mapped[str] = mapped_column(String(64))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    storage_class: Mapped[str] = mapped_column(String(NAME))
    access_mode: Mapped[str] = mapped_column(String(32))
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    reason_code: Mapped[str] = mapped_column(String(64), default="")
    reason_fields: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    path: Mapped[str] = mapped_column(Text, default="")
    claim: Mapped[str] = mapped_column(String(NAME), default="")
    details: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    #: metering (service/usage_volumes.py): the volume's time is recorded up to here; None:
    #: not yet seen by metering (made before it existed: adopted from the next step)
    metered_until: Mapped[float | None] = mapped_column(Float, nullable=True)


class ClusterRow(Base):
    """A tenant cluster (:mod:`gpuaas.model.cluster`): its spec as asked (``spec``: the
    API's camelCase body), its state and the reason of the last change. Its nodes are
    :class:`ClusterNodeRow` rows."""

    __tablename__ = "clusters"
    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_cluster_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(63))
    kind: Mapped[str] = mapped_column(String(32))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    reason_code: Mapped[str] = mapped_column(String(64), default="")
    reason_fields: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class ClusterNodeRow(Base):
    """A fleet node carved into a cluster. ``node`` is unique: a node is in at most one
    cluster, which the database itself holds. ``releasing``: the node leaves the cluster once
    its work is drained (scale-in, deletion)."""

    __tablename__ = "cluster_nodes"
    node: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    cluster_id: Mapped[int] = mapped_column(
        ForeignKey("clusters.id", ondelete="CASCADE"), index=True
    )
    pool: Mapped[str] = mapped_column(String(63))
    releasing: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)


class ClusterEvent(Base):
    """One change of a cluster (its state, its nodes), with the reason a tenant-admin reads."""

    __tablename__ = "cluster_events"
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    cluster_id: Mapped[int] = mapped_column(
        ForeignKey("clusters.id", ondelete="CASCADE"), index=True
    )
    at: Mapped[float] = mapped_column(Float)
    from_state: Mapped[str | None] = mapped_column(String(16), nullable=True)
    to_state: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(Text, default="")
    reason_code: Mapped[str] = mapped_column(String(64), default="")
    reason_fields: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class IdlePoolReclaim(Base):
    """A node the idle pool is giving back (:mod:`gpuaas.service.idle_pool`): asked for at
    ``requested_at``; the pool jobs on it (``jobs``) got their checkpoint signal at
    ``signalled_at`` (None: not yet sent) and are never evicted before ``signalled_at +
    grace``; ``evicting`` once that has passed and the node drains. ``demand``: what asked for
    the node (``{"jobs": [...]}`` pending tenant jobs, or what ``reclaim_for``'s caller named).
    Kept until the node has left the pool cluster, so a new leader honours the same deadline."""

    __tablename__ = "idle_pool_reclaims"
    node: Mapped[str] = mapped_column(String(NAME), primary_key=True)
    cluster_id: Mapped[int] = mapped_column(
        ForeignKey("clusters.id", ondelete="CASCADE"), index=True
    )
    requested_at: Mapped[float] = mapped_column(Float)
    signalled_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    grace: Mapped[float] = mapped_column(Float)
    evicting: Mapped[bool] = mapped_column(Boolean, default=False)
    jobs: Mapped[list[Any]] = mapped_column(JSON, default=list)
    demand: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class ClusterAllowance(Base):
    """What the provider lets a tenant carve: ``pools``, the node pools it may draw from
    (``[{name, flavor | gpuModel}]``), and ``node_limit``, the most nodes all its clusters
    hold together. No row: the tenant may create no cluster."""

    __tablename__ = "cluster_allowances"
    tenant_id: Mapped[int] = mapped_column(
        ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True
    )
    pools: Mapped[list[Any]] = mapped_column(JSON, default=list)
    node_limit: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[float] = mapped_column(Float)


class DatasetRow(Base):
    """A tenant's registered dataset (:class:`gpuaas.model.dataset.Dataset`); sizes in bytes,
    ``cache_bytes`` 0: the dataset's size."""

    __tablename__ = "datasets"
    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_dataset_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(63))
    uri: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    runtime: Mapped[str] = mapped_column(String(16))
    cache_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class DatasetCache(Base):
    """A dataset's cache on one node: ``state`` ``warm`` (the files are there) or ``loading``
    (a preload asked, the reconciler has not run it yet) or ``failed`` (``error`` says why);
    ``source`` says what made it warm (``job``, ``preload``, ``backend``); ``used_at`` orders
    the node's caches for least-recently-used eviction (docs/datasets.md)."""

    __tablename__ = "dataset_caches"
    __table_args__ = (UniqueConstraint("dataset_id", "node", name="uq_dataset_cache"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(
        ForeignKey("datasets.id", ondelete="CASCADE"), index=True
    )
    node: Mapped[str] = mapped_column(String(NAME), index=True)
    state: Mapped[str] = mapped_column(String(16))
    source: Mapped[str] = mapped_column(String(16))
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    error: Mapped[str] = mapped_column(Text, default="")
    warm_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    used_at: Mapped[float] = mapped_column(Float)


class AuditRow(Base):
    """One write request and how it ended (:mod:`gpuaas.service.audit`). Append-only: nothing
    updates or deletes a row. ``before_digest``/``after_digest``: SHA-256 of the object before
    and after (the answer's body), chaining an object's entries."""

    __tablename__ = "audit_log"
    __table_args__ = (
        Index("ix_audit_tenant_id", "tenant", "id"),
        Index("ix_audit_object", "object", "id"),
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    at: Mapped[float] = mapped_column(Float)
    user: Mapped[str] = mapped_column(String(NAME), default="")
    token_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tenant: Mapped[str | None] = mapped_column(String(NAME), nullable=True)
    method: Mapped[str] = mapped_column(String(8))
    route: Mapped[str] = mapped_column(String(300))
    object: Mapped[str] = mapped_column(String(1000))
    status: Mapped[int] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(8))
    request_digest: Mapped[str] = mapped_column(String(64))
    after_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    before_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)


#: Tables every write request appends to whatever its outcome: a refused write leaves its trace
#: there and nothing else (tests that check "refused means nothing written" skip these).
REQUEST_LOGS = frozenset({AuditRow.__tablename__})


class ReplicaSetRow(Base):
    """An inference job that scales its replicas (``autoscale`` in its spec;
    docs/workload-autoscaling.md): ``job_id`` is the job itself (its first replica);
    ``desired`` the count the last decision asked for; ``scaled_at`` when the count last
    changed (the cooldown runs from it); ``full`` the clusters a replica spilled from, with
    when; ``reason*`` the last decision worth telling, structured as a job's reason is, at
    ``decided_at``. Its further replicas are :class:`ReplicaMemberRow` rows."""

    __tablename__ = "replica_sets"
    job_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"),
        ForeignKey("jobs.id", ondelete="CASCADE"),
        primary_key=True,
    )
    desired: Mapped[int] = mapped_column(Integer, default=1)
    scaled_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    full: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    reason: Mapped[str] = mapped_column(Text, default="")
    reason_code: Mapped[str] = mapped_column(String(64), default="")
    reason_fields: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    decided_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class ReplicaMemberRow(Base):
    """A further replica of a :class:`ReplicaSetRow`: a job of its own (``job_id``), in
    ``cluster`` (``""``: the shared pool), the ``ordinal``-th one made for the set."""

    __tablename__ = "replica_members"
    job_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"),
        ForeignKey("jobs.id", ondelete="CASCADE"),
        primary_key=True,
    )
    set_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"),
        ForeignKey("replica_sets.job_id", ondelete="CASCADE"),
        index=True,
    )
    cluster: Mapped[str] = mapped_column(String(63), default="")
    ordinal: Mapped[int] = mapped_column(Integer)


# --- metering: the price book, usage records, and what is held now (docs/billing.md) --------


class PriceEntryRow(Base):
    """A price of one SKU in one book (:class:`gpuaas.model.billing.PriceEntry`): ``book`` is
    ``provider`` (what tenants pay) or ``tenant/<name>`` (a tenant-admin's internal
    chargeback book for its users). Prices are nano-units of ``currency`` per unit-hour
    (:mod:`gpuaas.billing.metering`). Immutable once a usage record is priced by it; an id is
    never used twice (records name entries by id)."""

    __tablename__ = "price_entries"
    __table_args__ = (
        UniqueConstraint("book", "name", name="uq_price_entry_name"),
        Index("ix_price_entries_book_sku", "book", "sku"),
        {"sqlite_autoincrement": True},
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    book: Mapped[str] = mapped_column(String(80))
    name: Mapped[str] = mapped_column(String(63))
    sku: Mapped[str] = mapped_column(String(200))
    list_per_hour: Mapped[int] = mapped_column(BigInteger)
    contracted_per_hour: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    valid_from: Mapped[float] = mapped_column(Float)
    valid_until: Mapped[float | None] = mapped_column(Float, nullable=True)
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class UsageRow(Base):
    """One usage record (:class:`gpuaas.model.billing.UsageRecord`), append-only: never
    updated, never deleted with a tenant or a job (no foreign keys: it is the ledger).
    ``key`` is idempotent (unique; writes are insert-or-ignore). ``quantity`` is micro-units
    (unit-seconds x 10^6), costs nano-units of ``currency``; ``price_id`` 0: no entry of the
    provider's book was in force (cost 0). ``period`` is the UTC month ``YYYY-MM``."""

    __tablename__ = "usage_records"
    __table_args__ = (
        UniqueConstraint("key", name="uq_usage_key"),
        Index("ix_usage_tenant_start", "tenant", "start"),
        Index("ix_usage_period_sku", "period", "sku"),
        Index("ix_usage_job", "job_id"),
        Index("ix_usage_price", "price_id"),
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    key: Mapped[str] = mapped_column(String(400))
    tenant: Mapped[str] = mapped_column(String(63))
    user: Mapped[str] = mapped_column(String(100))
    queue: Mapped[str] = mapped_column(String(NAME))
    cluster: Mapped[str] = mapped_column(String(63), default="")
    job_id: Mapped[int] = mapped_column(BigInteger)
    attempt: Mapped[int] = mapped_column(Integer)
    pod: Mapped[str] = mapped_column(String(NAME))
    device: Mapped[str] = mapped_column(String(100))
    node: Mapped[str] = mapped_column(String(NAME))
    sku: Mapped[str] = mapped_column(String(200))
    period: Mapped[str] = mapped_column(String(7))
    start: Mapped[float] = mapped_column(Float)
    end: Mapped[float] = mapped_column(Float)
    quantity: Mapped[int] = mapped_column(BigInteger)
    price_id: Mapped[int] = mapped_column(Integer)
    currency: Mapped[str] = mapped_column(String(3))
    list_cost: Mapped[int] = mapped_column(BigInteger)
    effective_cost: Mapped[int] = mapped_column(BigInteger)
    utilization: Mapped[float | None] = mapped_column(Float, nullable=True)


class UsageOpen(Base):
    """What an admitted or running job holds and since when its time is not yet recorded:
    one row per job, written when it enters Admitted/Running, moved forward to the last
    whole hour by the metering step, deleted when it leaves (its records written in the same
    transaction). ``held``: ``[[pod, device, node, sku, numerator, denominator], ...]``."""

    __tablename__ = "usage_open"
    job_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    since: Mapped[float] = mapped_column(Float)
    tenant: Mapped[str] = mapped_column(String(63))
    user: Mapped[str] = mapped_column(String(100))
    queue: Mapped[str] = mapped_column(String(NAME))
    cluster: Mapped[str] = mapped_column(String(63), default="")
    held: Mapped[list[Any]] = mapped_column(JSON)


# --- invoicing: closed invoices, their lines, budgets and what they fired (docs/billing.md) ---


class InvoiceRow(Base):
    """A tenant's closed invoice for one month (``period``: ``YYYY-MM``, UTC). An open month
    has no row: its invoice is computed from the usage records; closing stores its lines
    (:class:`InvoiceLineRow`) and this row, and from then on nothing of it changes. Like the
    usage records it is a ledger: it names its tenant and has no foreign key. Money in
    nano-units of ``currency``."""

    __tablename__ = "invoices"
    __table_args__ = (UniqueConstraint("tenant", "period", name="uq_invoice_period"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant: Mapped[str] = mapped_column(String(63))
    period: Mapped[str] = mapped_column(String(7))
    currency: Mapped[str] = mapped_column(String(3))
    total: Mapped[int] = mapped_column(BigInteger)
    closed_at: Mapped[float] = mapped_column(Float)
    closed_by: Mapped[str] = mapped_column(String(100), default="")


class InvoiceLineRow(Base):
    """A line of a tenant's month, never edited: a credit or an adjustment added while the
    month is open, and at closing the month's usage and late-usage lines
    (:class:`gpuaas.billing.invoices.InvoiceLine`). ``quantity`` in micro unit-seconds,
    money in nano-units; ``for_period``: the month late usage belongs to."""

    __tablename__ = "invoice_lines"
    __table_args__ = (Index("ix_invoice_lines_tenant_period", "tenant", "period"),)
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(63))
    period: Mapped[str] = mapped_column(String(7))
    kind: Mapped[str] = mapped_column(String(16))
    description: Mapped[str] = mapped_column(Text, default="")
    sku: Mapped[str] = mapped_column(String(200), default="")
    price_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    quantity: Mapped[int] = mapped_column(BigInteger, default=0)
    unit: Mapped[str] = mapped_column(String(32), default="")
    list_cost: Mapped[int] = mapped_column(BigInteger, default=0)
    contracted_cost: Mapped[int] = mapped_column(BigInteger, default=0)
    billed_cost: Mapped[int] = mapped_column(BigInteger)
    for_period: Mapped[str] = mapped_column(String(7), default="")
    created_at: Mapped[float] = mapped_column(Float)
    created_by: Mapped[str] = mapped_column(String(100), default="")


class BudgetRow(Base):
    """A tenant's budget (:class:`gpuaas.billing.budgets.Budget`): ``scope_kind`` tenant,
    queue, cluster or user and ``scope`` its name (``scope_key``: what a workload names it
    by, a user's id); ``period`` monthly or weekly; money in nano-units (``amount`` None: a
    rate cap only); ``thresholds``: soft percentages; ``webhook``: where alerts are POSTed."""

    __tablename__ = "budgets"
    __table_args__ = (UniqueConstraint("tenant_id", "name", name="uq_budget_name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(63))
    scope_kind: Mapped[str] = mapped_column(String(16))
    scope: Mapped[str] = mapped_column(String(NAME))
    scope_key: Mapped[str] = mapped_column(String(NAME))
    period: Mapped[str] = mapped_column(String(16))
    amount: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    currency: Mapped[str] = mapped_column(String(3))
    thresholds: Mapped[list[Any]] = mapped_column(JSON, default=list)
    hard: Mapped[bool] = mapped_column(Boolean, default=False)
    stop_running: Mapped[bool] = mapped_column(Boolean, default=False)
    max_rate_per_hour: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    webhook: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class BudgetEvent(Base):
    """What a budget did in one of its periods, once: a soft ``threshold`` reached (kind
    ``threshold``), its hard amount reached (``hold``). Unique per budget, period, kind and
    threshold, so a restart never fires one twice. ``delivered_at`` / ``attempts`` /
    ``error``: its webhook's delivery (retried until delivered or out of attempts)."""

    __tablename__ = "budget_events"
    __table_args__ = (
        UniqueConstraint("budget_id", "period", "kind", "threshold", name="uq_budget_event"),
    )
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    budget_id: Mapped[int] = mapped_column(ForeignKey("budgets.id", ondelete="CASCADE"), index=True)
    period: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(16))
    threshold: Mapped[int] = mapped_column(Integer, default=0)
    spent: Mapped[int] = mapped_column(BigInteger)
    at: Mapped[float] = mapped_column(Float)
    message: Mapped[str] = mapped_column(Text, default="")
    delivered_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str] = mapped_column(Text, default="")
