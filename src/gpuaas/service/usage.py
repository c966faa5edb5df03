"""Usage records: every second a job holds a device, written once, at the one choke point.

Semantics (docs/billing.md). A job holds its devices from the moment it enters Admitted (the
devices are reserved for it, whether or not its backend has started it) until it leaves
Admitted/Running for any state (finished, failed, cancelled, preempted, requeued). Both edges
pass through :func:`gpuaas.service.jobs.transition`, which calls :func:`on_transition` in the
same transaction as the state change:

- *entering* Admitted/Running (from any other state) **opens** the job: one
  :class:`~gpuaas.store.tables.UsageOpen` row says what it holds (every device in the one
  device naming, its SKU and the fraction of a unit, plus each pod's CPU and memory) and since
  when;
- *leaving* Admitted/Running **closes** it: the records from ``since`` to the transition's
  time are written, cut at whole UTC hours (so at billing periods too), each priced by the
  provider's book entry in force at its start, and the open row is deleted;
- between the two nothing is written, however long the job runs, except by :func:`step`
  (the reconciler calls it), which writes a running job's records up to the last whole hour
  and moves ``since`` there, so cost-to-date is never more than an hour (plus
  :data:`LAG`) behind.

A record's ``key`` (job/attempt/pod/device/start) is unique in the table and every write is
insert-or-ignore, so the same piece written twice (two leaders for a moment, a replayed step)
is stored once. Because the records and the state change commit in one transaction, a
``kill -9`` loses both or neither: after a restart the open row is still there and the job's
time is recorded from ``since`` when it next leaves Admitted/Running. Records are never
updated; a price change is a new price entry and prices only records that start after it.

Read functions for the invoicing side: :func:`records` (model
:class:`~gpuaas.model.billing.UsageRecord`, Decimals), :func:`totals` (one SQL aggregate per
group: per tenant x SKU by default, the rating the invoices start from), :func:`pool_usage`
(the idle pool's GPU-seconds by GPU model, MIG profile and period).
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, NamedTuple

from sqlalchemy import Select, and_, bindparam, delete, func, literal, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL
from sqlalchemy.orm import Session

from gpuaas.billing.metering import (
    US,
    Held,
    Piece,
    book_of,
    cut,
    hour_floor,
    money,
    period_bounds,
    stored,
    to_us,
)
from gpuaas.billing.metering import usage_record as record_of
from gpuaas.billing.skus import held_by, parse_sku
from gpuaas.engine.admission.restore import PlacementLost, typed_pods
from gpuaas.model.billing import CapacityPool, PriceEntry, Shape, UsageRecord
from gpuaas.model.errors import InvalidValue
from gpuaas.model.job_state import ACTIVE
from gpuaas.model.node import Node
from gpuaas.model.placement import PodPlacement as TypedPod
from gpuaas.model.telemetry import UtilisationReader
from gpuaas.store.tables import (
    ClusterRow,
    Job,
    NodeRow,
    PriceEntryRow,
    Tenant,
    UsageOpen,
    UsageRow,
    User,
)

log = logging.getLogger("gpuaas.usage")

#: The provider's book: what tenants pay. A tenant's chargeback book is ``tenant/<name>``.
PROVIDER_BOOK = "provider"
#: The currency of a record no price entry priced.
NO_CURRENCY = ""
#: How far behind ``now`` the metering step stops: a completion reported late (a backend's
#: poll) must still find its time unrecorded, so the step closes hours only this much later.
LAG = 300.0
#: Seconds between two runs of :func:`step` in the reconciler.
STEP_EVERY = 60.0

_ACTIVE = frozenset(s.value for s in ACTIVE)
_USAGE = UsageRow.__table__
_OPEN = UsageOpen.__table__
_JOB, _TENANT, _USER = Job.__table__, Tenant.__table__, User.__table__
_PRICE, _NODE = PriceEntryRow.__table__, NodeRow.__table__
# The statements of the transition path, built once: Core statements with bound parameters,
# so a transition pays neither building nor ORM compilation, only the compiled cache's hit
# (building and coercing them was a third of metering's CPU per transition).
#: a close takes the open row and deletes it in one statement (SQLite >= 3.35, PostgreSQL)
_TAKE_OPEN = delete(_OPEN).where(_OPEN.c.job_id == bindparam("job")).returning(*_OPEN.c)
_OPENING = (
    select(_JOB.c.attempts, _JOB.c.local_queue, _JOB.c.spec, _JOB.c.placement, _JOB.c.tenant_id,
           _TENANT.c.name, _USER.c.name)
    .join(_TENANT, _TENANT.c.id == _JOB.c.tenant_id)
    .join(_USER, _USER.c.id == _JOB.c.user_id)
    .where(_JOB.c.id == bindparam("job"))
)  # fmt: skip
#: the same without the stored placement, for a caller that gives it (it can be megabytes)
_OPENING_GIVEN = _OPENING.with_only_columns(
    _JOB.c.attempts, _JOB.c.local_queue, _JOB.c.spec, literal(None), _JOB.c.tenant_id,
    _TENANT.c.name, _USER.c.name,
)  # fmt: skip
_PRICES = (
    select(_PRICE)
    .where(_PRICE.c.book == bindparam("book"), _PRICE.c.sku.in_(bindparam("skus", expanding=True)))
    .order_by(_PRICE.c.valid_from)
)
_STAMPS = select(_NODE.c.name, _NODE.c.updated_at).where(
    _NODE.c.name.in_(bindparam("names", expanding=True))
)


@dataclass(slots=True)
class _Config:
    enabled: bool = True
    reader: UtilisationReader | None = None


_configs: dict[str, _Config] = {}
_nodes: dict[tuple[str, str, float], Node] = {}
_lock = threading.Lock()


def configure(db_url: str, enabled: bool = True, reader: UtilisationReader | None = None) -> None:
    """Metering for the database at ``db_url``: on or off (``gpuaas serve --no-metering``,
    for measuring what it costs), and the telemetry a record's utilisation is read from
    (None: records carry none)."""
    with _lock:
        _configs[_key_of(db_url)] = _Config(enabled, reader)


def _key_of(url: str) -> str:
    from sqlalchemy.engine import make_url

    return _rendered(make_url(url))


@functools.lru_cache(maxsize=64)
def _rendered(url: URL) -> str:
    """A database's key (its URL without the password), rendered once per URL: every
    transition asks for it, and rendering a URL is most of what asking costs."""
    return url.render_as_string(hide_password=True)


def _config(session: Session) -> _Config:
    return _configs.get(_rendered(session.get_bind().url)) or _Config()


def enabled(session: Session) -> bool:
    """Whether metering writes records for ``session``'s database (see :func:`configure`)."""
    return _config(session).enabled


# --- the choke point ----------------------------------------------------------------------


def on_transition(
    session: Session, job_id: int, source: str, target: str, now: float,
    values: Mapping[str, Any],
) -> None:  # fmt: skip
    """Called by :func:`~gpuaas.service.jobs.transition` after a job moved from ``source``
    to ``target`` (same transaction): close on leaving Admitted/Running, open on entering."""
    was, now_active = source in _ACTIVE, str(target) in _ACTIVE
    if was == now_active:
        return
    config = _config(session)
    if not config.enabled:
        return
    if was:
        close(session, job_id, now, config.reader)
    else:
        open_(session, job_id, now, values.get("placement"))


def open_(
    session: Session, job_id: int, now: float, placement: Sequence[Any] | None = None
) -> None:
    """Record that job ``job_id`` holds its placement from ``now`` (see the module)."""
    # the stored placement is read back only when not given (a 10,000-pod one is megabytes)
    opening = _OPENING if placement is None else _OPENING_GIVEN
    row = session.execute(opening, {"job": job_id}).one_or_none()
    if row is None:
        return
    attempt, queue, spec, stored, tenant_id, tenant, user = row
    pods = list(placement if placement is not None else stored or [])
    cluster = str((spec or {}).get("cluster") or "")
    pool = pool_of(session, tenant_id, cluster)
    typed = getattr(placement, "typed", None)  # typed at admission (restore.Recorded)
    held = [stored_held(item, count) for item, count in held_items(session, pods, pool, typed)]
    values = {"job_id": job_id, "attempt": attempt or 0, "since": now, "tenant": tenant,
              "user": user, "queue": queue, "cluster": cluster, "held": held}  # fmt: skip
    insert_open = _insert_ignoring(session, _OPEN, "job_id")
    if session.execute(insert_open, values).rowcount == 0:  # type: ignore[attr-defined]
        close(session, job_id, now, None)  # open already (never expected): keep its time
        session.execute(insert_open, values)


def close(
    session: Session, job_id: int, now: float, reader: UtilisationReader | None = None
) -> int:
    """Write job ``job_id``'s records up to ``now`` and forget what it held; the records
    written (0 when it held nothing open)."""
    row = session.execute(_TAKE_OPEN, {"job": job_id}).one_or_none()  # same transaction
    if row is None:
        return 0
    return _write(session, row, to_us(row.since), max(to_us(now), to_us(row.since)), reader)


def step(session: Session, now: float, reader: UtilisationReader | None = None) -> int:
    """Write every open job's records up to the last whole hour at least :data:`LAG` before
    ``now`` and move its ``since`` there; adopt active jobs that hold nothing open (admitted
    before metering was installed: from their admission). Returns the records written."""
    if not _config(session).enabled:
        return 0
    if reader is None:
        reader = _config(session).reader
    adopted = session.execute(
        select(Job.id, Job.admitted_at).where(
            Job.state.in_(_ACTIVE), ~Job.id.in_(select(UsageOpen.job_id))
        )
    ).all()
    for job_id, admitted_at in adopted:
        open_(session, job_id, admitted_at if admitted_at is not None else now)
    until = hour_floor(to_us(now - LAG))
    written = 0
    for row in session.scalars(select(UsageOpen).where(UsageOpen.since < until / US)):
        since = row.since
        moved = session.execute(
            update(UsageOpen)
            .where(UsageOpen.job_id == row.job_id, UsageOpen.since == since)
            .values(since=until / US)
            .execution_options(synchronize_session=False)
        )
        if moved.rowcount == 1:  # type: ignore[attr-defined]
            written += _write(session, row, to_us(since), until, reader)
    return written


# --- what a job holds ---------------------------------------------------------------------


def held_items(
    session: Session, pods: Sequence[Any], pool: CapacityPool,
    typed: Sequence[TypedPod] | None = None,
) -> list[tuple[Held, int]]:  # fmt: skip
    """The billable items of a recorded placement (its devices by the one device naming),
    each with how many pods hold it (see :func:`held_runs`); ``typed``: its pods as the
    admission typed them, when it did."""
    names = sorted({str(p.get("node")) for p in pods if isinstance(p, Mapping)})
    nodes = _load_nodes(session, names)
    if typed is None:
        try:
            typed = typed_pods([p for p in pods if isinstance(p, Mapping)], nodes.get)
        except (PlacementLost, InvalidValue) as exc:
            log.warning("metering: cannot read a placement (%s); its devices are not recorded",
                        exc)  # fmt: skip
            return []
    return held_runs(typed, nodes, pool)


def held_runs(
    typed: Sequence[TypedPod], nodes: Mapping[str, Node], pool: CapacityPool
) -> list[tuple[Held, int]]:
    """What ``typed`` pods hold on ``nodes``, each item with the number of pods it stands for.
    A pod with devices gives its own items (count 1). Device-less pods of one pod set with
    consecutive indexes on one node, with the same CPU and memory, hold the same items under
    their own names: a run of them is one item per resource, named by the run's first pod,
    with the run's length (a gang of 10,000 ``cpu: 1m`` pods is two: its CPU and its memory,
    priced once). :func:`held_of` names each pod of a run again."""
    out: list[list[Any]] = []  # [item, count], counts grown in place as a run goes on
    bare: dict[tuple[str, int, int], list[Held]] = {}
    run: tuple[tuple[str, int, int, str], list[list[Any]]] | None = None
    following = -1  # the index that continues the run
    for pod in typed:
        node = nodes.get(pod.node)
        if node is None:
            continue
        if pod.devices:
            out.extend([h, 1] for h in held_by(pod, node, pool))
            run = None
            continue
        key = (pod.node, pod.cpu_milli, pod.memory_bytes, pod.pod_set)
        if run is not None and run[0] == key and pod.index == following:
            following += 1
            for entry in run[1]:
                entry[1] += 1
            continue
        items = bare.get(key[:3])
        if items is None:
            items = bare[key[:3]] = held_by(pod, node, pool)
        label = f"{pod.pod_set}-{pod.index}"
        entries = [[Held(label, h.device, h.node, h.sku, h.fraction), 1] for h in items]
        out.extend(entries)
        run, following = (key, entries), pod.index + 1
    return [(item, count) for item, count in out]


def _load_nodes(session: Session, names: Sequence[str]) -> dict[str, Node]:
    """The nodes ``names`` (parsed once per stored version, cached per process)."""
    from gpuaas.service.fleet import nodes_from_rows

    if not names:
        return {}
    url = _rendered(session.get_bind().url)
    out: dict[str, Node] = {}
    stamps = session.execute(_STAMPS, {"names": list(names)}).all()
    missing = []
    for name, updated in stamps:
        node = _nodes.get((url, name, updated))
        if node is None:
            missing.append(name)
        else:
            out[name] = node
    if missing:
        rows = list(session.scalars(select(NodeRow).where(NodeRow.name.in_(missing))))
        for row, node in zip(rows, nodes_from_rows(rows), strict=True):
            with _lock:
                if len(_nodes) > 100_000:
                    _nodes.clear()
                _nodes[(url, row.name, row.updated_at)] = node
            out[row.name] = node
    return out


def pool_of(session: Session, tenant_id: int, cluster: str) -> CapacityPool:
    """The idle-capacity pool cluster sells spot; a tenant's own cluster is reserved capacity;
    the shared fleet is on-demand."""
    if not cluster:
        return CapacityPool.ON_DEMAND
    spec = session.scalar(
        select(ClusterRow.spec).where(ClusterRow.tenant_id == tenant_id, ClusterRow.name == cluster)
    )
    if spec is not None and spec.get("idlePool"):
        return CapacityPool.SPOT
    return CapacityPool.RESERVED


def stored_held(item: Held, count: int = 1) -> list[Any]:
    """``item`` as ``usage_open.held`` stores it: ``[pod, device, node, sku, numerator,
    denominator]``, and ``count`` after them for a run of pods (see :func:`held_runs`: the
    pods ``<podSet>-<i>`` from ``pod``'s index on)."""
    row = [item.pod, item.device, item.node, item.sku, item.fraction.numerator,
           item.fraction.denominator]  # fmt: skip
    return [*row, count] if count > 1 else row


def held_count(raw: Sequence[Any]) -> int:
    """How many pods a stored ``held`` row stands for (see :func:`stored_held`)."""
    return int(raw[6]) if len(raw) > 6 else 1


def held_of(raw: Sequence[Any]) -> list[Held]:
    """A stored ``held`` row as the items of each of its pods (see :func:`stored_held`):
    readers expand the runs, so the records written are one per pod and device as before."""
    pod, device, node, sku, num, den = raw[:6]
    fraction = Fraction(int(num), int(den))
    count = held_count(raw)
    if count == 1:
        return [Held(str(pod), str(device), str(node), str(sku), fraction)]
    pod_set, _, first = str(pod).rpartition("-")
    start = int(first)
    return [Held(f"{pod_set}-{start + k}", str(device), str(node), str(sku), fraction)
            for k in range(count)]  # fmt: skip


# --- writing records ----------------------------------------------------------------------


def entries(session: Session, book: str, skus: Sequence[str] | None = None) -> list[PriceEntry]:
    """The entries of ``book`` (for ``skus`` only when given), as model price entries."""
    if skus is not None:  # on every close: the statement built once
        found = session.execute(_PRICES, {"book": book, "skus": sorted(set(skus))})
    else:
        found = session.execute(
            select(_PRICE).where(_PRICE.c.book == book).order_by(_PRICE.c.valid_from)
        )
    return [price_entry(r) for r in found]


def price_entry(row: Any) -> PriceEntry:
    """A stored entry (an ORM row or a Core row of ``price_entries``) as the model's."""
    return PriceEntry(
        id=row.id, book=row.book, sku=row.sku, list_per_hour=money(row.list_per_hour),
        contracted_per_hour=money(row.contracted_per_hour), currency=row.currency,
        valid_from=row.valid_from, valid_until=row.valid_until,
    )  # fmt: skip


def _write(
    session: Session, row: Any, start_us: int, end_us: int,
    reader: UtilisationReader | None,
) -> int:  # fmt: skip
    held = [h for raw in row.held or [] for h in held_of(raw)]
    return write_pieces(session, row, cut(row.job_id, row.attempt, held, start_us, end_us), reader)


def write_pieces(
    session: Session, row: Any, pieces: Sequence[Piece], reader: UtilisationReader | None
) -> int:
    """Price ``pieces`` by the provider's book and insert them (insert-or-ignore); ``row``
    says whose they are (``tenant``, ``user``, ``queue``, ``cluster``, ``job_id``,
    ``attempt``). Returns how many were given. Pricing is billing's
    (:func:`gpuaas.billing.metering.stored`), the one rule the simulator uses too."""
    if not pieces:
        return 0
    book = book_of(entries(session, PROVIDER_BOOK, sorted({p.held.sku for p in pieces})))
    values = [_values(row, piece, book.get(piece.held.sku, ()), reader) for piece in pieces]
    _insert_or_ignore(session, values)
    return len(values)


def _values(
    row: Any, piece: Piece, prices: Sequence[PriceEntry],
    reader: UtilisationReader | None,
) -> dict[str, Any]:  # fmt: skip
    values = stored(row, piece, prices, NO_CURRENCY)
    utilization = None
    if reader is not None and piece.held.device not in ("cpu", "memory"):
        utilization = measured(reader, piece)
    values["utilization"] = utilization
    return values


def measured(reader: UtilisationReader, piece: Piece) -> float | None:
    """The device's measured mean utilisation for ``piece``: the telemetry window's mean
    when its samples (``[until - span, until]``) overlap the piece, so a record is never
    labelled with what its device did after it ended (an hourly record the step writes
    :data:`LAG` later carries none: the window holds only the last minutes). None: no
    telemetry, a stale (unknown) window, or one from another time."""
    summary = reader.device(piece.held.node, piece.held.device)
    if summary is None or not summary.known:
        return None
    start, end = piece.start_us / US, piece.end_us / US
    if summary.until - summary.span > end or summary.until < start:
        return None
    return summary.mean


def _insert_or_ignore(session: Session, values: list[dict[str, Any]]) -> None:
    """Insert the records; one whose key is stored already is left as it is."""
    session.execute(_insert_ignoring(session, _USAGE, "key"), values)


@functools.lru_cache(maxsize=8)
def _ignoring(dialect: str, table: Any, key: str) -> Any:
    maker = sqlite_insert if dialect == "sqlite" else pg_insert
    return maker(table).on_conflict_do_nothing(index_elements=[key])


def _insert_ignoring(session: Session, table: Any, key: str) -> Any:
    """``INSERT ... ON CONFLICT (key) DO NOTHING`` into ``table`` for the session's
    dialect, built once per dialect."""
    return _ignoring(session.get_bind().dialect.name, table, key)


# --- reading ------------------------------------------------------------------------------


def usage_record(row: Any) -> UsageRecord:
    """A stored record (a Core row of ``usage_records``) as the model's :class:`UsageRecord`."""
    return record_of(row._mapping)


class Stored(NamedTuple):
    """A record as stored: its row id (a cursor), the record, its currency."""

    id: int
    record: UsageRecord
    currency: str


def _window(
    stmt: Select[Any], tenant: str | None, start: float | None, end: float | None,
    user: str | None = None, job: int | None = None, sku: str | None = None,
    cluster: str | None = None, queue: str | None = None,
) -> Select[Any]:  # fmt: skip
    """Records of ``tenant`` (all when None) that *start* in ``[start, end)``: every record
    lies within one hour, so a window on whole hours (a day, a period) takes whole records."""
    c = _USAGE.c
    conditions = []
    if tenant is not None:
        conditions.append(c.tenant == tenant)
    if start is not None:
        conditions.append(c.start >= start)
    if end is not None:
        conditions.append(c.start < end)
    for column, value in ((c.user, user), (c.job_id, job), (c.sku, sku), (c.cluster, cluster),
                          (c.queue, queue)):  # fmt: skip
        if value is not None:
            conditions.append(column == value)
    return stmt.where(and_(*conditions)) if conditions else stmt


def records(
    session: Session, tenant: str | None, start: float | None = None, end: float | None = None,
    *, user: str | None = None, job: int | None = None, sku: str | None = None,
    cluster: str | None = None, queue: str | None = None, after: int = 0,
    limit: int | None = None,
) -> list[Stored]:  # fmt: skip
    """The records of ``tenant`` (None: every tenant's) starting in ``[start, end)``, in the
    order they were written, each with its row id (pass the last as ``after`` for the next
    page) and its currency (empty: no price entry priced it); the filters narrow them to one
    user, job, SKU, cluster or queue."""
    stmt = _window(select(_USAGE), tenant, start, end, user, job, sku, cluster, queue)
    stmt = stmt.where(_USAGE.c.id > after).order_by(_USAGE.c.id)
    if limit is not None:
        stmt = stmt.limit(limit)
    return [Stored(r.id, usage_record(r), r.currency) for r in session.execute(stmt)]


#: What :func:`totals` may group by.
GROUPS = ("tenant", "user", "queue", "cluster", "job_id", "sku", "period", "currency", "node",
          "price_id")  # fmt: skip


@dataclass(frozen=True, slots=True)
class Total:
    """One group's sums: ``group`` maps each grouped column to its value; ``quantity`` in
    unit-seconds, costs in the currency."""

    group: dict[str, Any]
    records: int
    quantity: Decimal
    list_cost: Decimal
    effective_cost: Decimal

    @property
    def unit_hours(self) -> Decimal:
        return self.quantity / 3600


def totals(
    session: Session, start: float | None = None, end: float | None = None,
    tenant: str | None = None, by: Sequence[str] = ("tenant", "sku", "currency"),
    ids: tuple[int, int] | None = None, **filters: Any,
) -> list[Total]:  # fmt: skip
    """Rating: the records starting in ``[start, end)`` summed per group (default: per tenant
    x SKU x currency) in one SQL aggregate over integer columns, so the sums are exact and a
    month of a million records takes seconds (docs/benchmarks.md). ``ids`` ``(after, upto)``:
    only the records of ids in ``(after, upto]`` (what was added since a sum was taken,
    :mod:`gpuaas.service.usage_sums`), read along the id range, not the tenant's index."""
    unknown = [g for g in by if g not in GROUPS]
    if unknown:
        raise ValueError(f"cannot group by {unknown} (allowed: {', '.join(GROUPS)})")
    c = _USAGE.c
    columns = [c[g] for g in by]
    stmt = select(
        *columns, func.count(), func.sum(c.quantity), func.sum(c.list_cost),
        func.sum(c.effective_cost),
    )  # fmt: skip
    if ids is not None:
        stmt = stmt.where(c.id > ids[0], c.id <= ids[1])
        if tenant is not None:  # an expression, so the planner walks the id range instead
            stmt, tenant = stmt.where(c.tenant.concat("") == tenant), None
    stmt = _window(stmt, tenant, start, end, **filters).group_by(*columns).order_by(*columns)
    out = []
    for row in session.execute(stmt):
        group = dict(zip(by, row[: len(by)], strict=True))
        count, quantity, list_cost, effective = row[len(by) :]
        out.append(
            Total(group, int(count), Decimal(int(quantity or 0)).scaleb(-6),
                  money(int(list_cost or 0)), money(int(effective or 0)))
        )  # fmt: skip
    return out


@dataclass(frozen=True, slots=True)
class PoolUsage:
    """GPU-seconds sold from the idle-capacity pool: ``shape`` whole, mig (with ``profile``),
    timeslice or mps; ``gpu_seconds`` counts a MIG instance as one unit of its SKU and a
    share as its fraction of a GPU."""

    period: str
    gpu_model: str
    shape: str
    profile: str
    gpu_seconds: Decimal
    records: int


def pool_usage(session: Session, period: str | None = None) -> list[PoolUsage]:
    """The idle pool's usage (records of ``idle-pool`` GPU SKUs) by period, GPU model and MIG
    profile (``period`` ``YYYY-MM``: that one; ValueError when malformed)."""
    c = _USAGE.c
    stmt = select(c.period, c.sku, func.count(), func.sum(c.quantity)).where(
        c.sku.like(f"%@{CapacityPool.SPOT.value}")
    )
    if period is not None:
        period_bounds(period)  # checks its form
        stmt = stmt.where(c.period == period)
    out = []
    for at, sku_id, count, quantity in session.execute(stmt.group_by(c.period, c.sku)):
        sku = parse_sku(sku_id)
        if sku is None or sku.shape in (Shape.CPU, Shape.MEMORY, Shape.STORAGE):
            continue
        out.append(PoolUsage(at, sku.resource, sku.shape.value, sku.profile,
                             Decimal(int(quantity or 0)).scaleb(-6), int(count)))  # fmt: skip
    return sorted(out, key=lambda u: (u.period, u.gpu_model, u.shape, u.profile))


def open_jobs(session: Session) -> dict[int, float]:
    """Jobs whose held time is not yet all recorded, and since when."""
    return dict(session.execute(select(UsageOpen.job_id, UsageOpen.since)).all())


def held_seconds(session: Session, job_id: int) -> Decimal:
    """Device-seconds recorded for ``job_id`` (every GPU device at its fraction)."""
    c = _USAGE.c
    total = session.scalar(
        select(func.sum(c.quantity)).where(
            c.job_id == job_id, c.device != "cpu", c.device != "memory"
        )
    )
    return Decimal(int(total or 0)).scaleb(-6)
