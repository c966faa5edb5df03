"""Datasets: a tenant's registered data, and which nodes hold a warm cache of each.

The API half is :class:`Datasets`, the service class of the ``Dataset`` entry of the one
resource table (tenant routes only: members read, tenant admins write, as the tenant's other
objects), plus :func:`preload`. The reconciler half keeps the ``dataset_caches`` rows true and
hands them to the engine (:mod:`gpuaas.engine.locality`):

- a preload asks for nodes: rows in state ``loading``; the reconciler runs them
  (:func:`run_preloads`): on a backend with node caches (local, Slurm: a dataset is a path,
  :mod:`gpuaas.backends.dataset_cache`) it copies the files there or finds them there, checked,
  and the row turns ``warm`` or ``failed`` with the reason (on Slurm a job on the node does it,
  and the row stays ``loading`` until that job has answered); a backend without files of its own
  (the simulator) reports the preload done at once; on Kubernetes Fluid's ``DataLoad`` loads
  the cache and Fluid's status says when (:mod:`gpuaas.service.fluid_warm`; ``caches_of``
  raises :class:`ReportedByBackend` for those nodes, whose preloads are left to it);
- a job that read the dataset and succeeded makes its nodes warm (:func:`warm_after_jobs`), on
  a backend with node caches only once the files are checked there;
- a backend may report warm nodes itself: Fluid on Kubernetes, through :func:`mark_warm`
  (:mod:`gpuaas.service.fluid_warm`).

Each node's cache has a capacity (``Settings.dataset_cache_bytes``, the same on every node): a
dataset takes its ``cacheSize`` there (its size when 0). When a dataset turns warm on a full
node, the least recently used datasets there (``used_at``: the last job that read it or the last
preload) are evicted (their files deleted on a backend with node caches) until it fits; a
dataset larger than the whole cache is refused there (``failed``). Every change bumps the meta
key ``datasets.version``; the reconciler then gives the engine the warm sets again, in place.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from gpuaas.backends.dataset_cache import CacheError, NodeCacheAgent
from gpuaas.engine.locality import DatasetKey
from gpuaas.engine.scheduling.admission import AdmissionScheduler
from gpuaas.model.dataset import CacheRuntime, Dataset, DatasetScheme
from gpuaas.model.errors import InvalidValue
from gpuaas.model.quantity import parse_bytes
from gpuaas.service.errors import invalid, missing
from gpuaas.service.governance_kinds import At, TenantNamed
from gpuaas.service.models.common import Page, bytes_text
from gpuaas.service.models.datasets import CacheOut, DatasetIn, DatasetOut, PreloadIn
from gpuaas.store.db import Database
from gpuaas.store.tables import DatasetCache, DatasetRow, Job, Meta, NodeRow, Tenant

WARM, LOADING, FAILED = "warm", "loading", "failed"
BY_JOB, BY_PRELOAD, BY_BACKEND = "job", "preload", "backend"
#: meta key bumped whenever a warm set may have changed
DATASETS_VERSION = "datasets.version"
SCHEMES = ", ".join(f"{s.value}://" for s in DatasetScheme)


# --- checks ----------------------------------------------------------------------------------


def check_uri(uri: str) -> DatasetScheme:
    """The scheme of ``uri``, or a 422 naming ``uri``."""
    head, sep, rest = uri.partition("://")
    if not sep:
        if not uri.startswith("/"):
            raise invalid("uri", f"{uri!r} has no scheme ({SCHEMES}) and is not an absolute path")
        return DatasetScheme.FILE
    try:
        scheme = DatasetScheme(head)
    except ValueError:
        raise invalid("uri", f"unknown scheme {head!r} (known: {SCHEMES} or a path)") from None
    if not rest.strip("/"):
        raise invalid("uri", f"{uri!r} names no {'path' if head == 'file' else 'location'}")
    return scheme


def _bytes(value: int | str | None, field: str) -> int:
    if value is None:
        return 0
    bytes_text(field, value, zero=True)
    try:
        amount = parse_bytes(value, field)
    except InvalidValue as exc:
        raise invalid(field, exc.problem) from None
    if amount < 0:
        raise invalid(field, f"must be >= 0, got {value}")
    return amount


def _runtime(value: str) -> CacheRuntime:
    try:
        return CacheRuntime(value)
    except ValueError:
        known = ", ".join(r.value for r in CacheRuntime)
        raise invalid("runtime", f"unknown cache runtime {value!r} (known: {known})") from None


def bump(session: Session) -> None:
    """Tell the reconciler a warm set may have changed."""
    row = session.get(Meta, DATASETS_VERSION)
    if row is None:
        session.add(Meta(key=DATASETS_VERSION, value="1"))
    else:
        row.value = str(int(row.value or "0") + 1)


def version(session: Session) -> str:
    row = session.get(Meta, DATASETS_VERSION)
    return "0" if row is None else row.value


def find(session: Session, tenant_id: int, name: str) -> DatasetRow | None:
    return session.scalar(
        select(DatasetRow).where(DatasetRow.tenant_id == tenant_id, DatasetRow.name == name)
    )


def dataset_of(row: DatasetRow, tenant: str) -> Dataset:
    """The model's :class:`Dataset` of a stored one (what the Fluid objects are made from)."""
    return Dataset(
        name=row.name,
        tenant=tenant,
        uri=row.uri,
        size_bytes=row.size_bytes,
        runtime=CacheRuntime(row.runtime),
        cache_bytes=row.cache_bytes,
    )


def resolve_for_job(
    session: Session, tenant_id: int, tenant: str, ref: Mapping[str, Any]
) -> dict[str, Any]:
    """What a job naming dataset ``ref`` carries for its backend, or a 422 naming
    ``dataset.name`` when the tenant has no such dataset."""
    name = str(ref["name"])
    row = find(session, tenant_id, name)
    if row is None:
        known = sorted(
            session.scalars(select(DatasetRow.name).where(DatasetRow.tenant_id == tenant_id))
        )
        shown = ", ".join(known[:20]) + (" ..." if len(known) > 20 else "")
        raise InvalidValue(
            "dataset.name",
            f"tenant {tenant} has no dataset {name!r} (registered: {shown or 'none'})",
        )
    return {
        "name": row.name,
        "uri": row.uri,
        "locality": ref.get("locality", "preferred"),
        "mountPath": ref.get("mountPath") or f"/datasets/{row.name}",
    }


# --- the API ---------------------------------------------------------------------------------


def _out(session: Session, row: DatasetRow, tenant: str) -> DatasetOut:
    caches = list(
        session.scalars(
            select(DatasetCache)
            .where(DatasetCache.dataset_id == row.id)
            .order_by(DatasetCache.node)
        )
    )
    return DatasetOut(
        name=row.name,
        tenant=tenant,
        uri=row.uri,
        scheme=check_uri(row.uri).value,
        size=row.size_bytes,
        runtime=row.runtime,
        cache_size=row.cache_bytes,
        warm_nodes=[c.node for c in caches if c.state == WARM],
        caches=[
            CacheOut(
                node=c.node,
                state=c.state,
                source=c.source,
                size_bytes=c.size_bytes,
                warm_at=c.warm_at,
                used_at=c.used_at,
                error=c.error,
            )
            for c in caches
        ],
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _values(body: DatasetIn) -> dict[str, Any]:
    check_uri(body.uri)
    return {
        "uri": body.uri,
        "size_bytes": _bytes(body.size, "size"),
        "runtime": _runtime(body.runtime).value,
        "cache_bytes": _bytes(body.cache_size, "cacheSize"),
    }


class Datasets(TenantNamed):
    """A tenant's datasets: where the data lives (``uri``: s3://, hdfs://, nfs://, file:// or
    an absolute path), its size, and the cache that keeps it warm next to the GPUs (``runtime``,
    ``cacheSize`` per node); the view says on which nodes it is warm (docs/datasets.md).
    Deleting one forgets its caches; jobs that named it keep running."""

    kind = "Dataset"
    row_type = DatasetRow

    def list(self, at: At, limit: int, after: str | None, **filters: Any) -> Page[Any]:
        rows, cursor = self._rows(at, limit, after)
        tenant = self._tenant(at).name
        return Page(items=[_out(at.session, r, tenant) for r in rows], next=cursor)

    def get(self, at: At, name: str) -> DatasetOut:
        return _out(at.session, self._row(at, name), self._tenant(at).name)

    def create(self, at: At, body: DatasetIn) -> DatasetOut:
        row = self._add(at, body.name, lambda: _values(body))
        at.session.flush()
        return _out(at.session, row, self._tenant(at).name)

    def update(self, at: At, name: str, body: DatasetIn) -> DatasetOut:
        self._same_name(body.name, name)
        row = self._row(at, name)
        values = _values(body)
        if values["uri"] != row.uri:  # other data: no node holds it warm any more
            at.session.execute(delete(DatasetCache).where(DatasetCache.dataset_id == row.id))
            bump(at.session)
        for key, value in values.items():
            setattr(row, key, value)
        row.updated_at = time.time()
        at.session.flush()
        return _out(at.session, row, self._tenant(at).name)

    def delete(self, at: At, name: str) -> None:
        row = self._row(at, name)
        at.session.execute(delete(DatasetCache).where(DatasetCache.dataset_id == row.id))
        at.session.delete(row)
        bump(at.session)


def preload(at: At, name: str, body: PreloadIn) -> DatasetOut:
    """Ask for the dataset warm on ``body.nodes`` (each a node of the fleet; 422 naming
    ``nodes`` otherwise): their caches turn ``loading`` until the reconciler has run the
    preload (a node already warm is checked again)."""
    service = Datasets()
    row = service._row(at, name)
    wanted = list(dict.fromkeys(body.nodes))
    known = set(at.session.scalars(select(NodeRow.name).where(NodeRow.name.in_(wanted))))
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise missing("nodes", f"no node named {', '.join(map(repr, unknown))} in the fleet")
    now = time.time()
    existing = {
        c.node: c
        for c in at.session.scalars(
            select(DatasetCache).where(
                DatasetCache.dataset_id == row.id, DatasetCache.node.in_(wanted)
            )
        )
    }
    for node in wanted:
        cache = existing.get(node)
        if cache is None:
            at.session.add(
                DatasetCache(
                    dataset_id=row.id,
                    node=node,
                    state=LOADING,
                    source=BY_PRELOAD,
                    size_bytes=0,
                    error="",
                    warm_at=None,
                    used_at=now,
                )
            )
        else:
            cache.state, cache.source, cache.error, cache.used_at = LOADING, BY_PRELOAD, "", now
    at.session.flush()
    return _out(at.session, row, service._tenant(at).name)


# --- the reconciler's half -------------------------------------------------------------------

#: the node caches of a node's backend: None when the backend keeps no files of its own (the
#: simulator: a preload is done when asked); CacheError when it cannot cache datasets (yet).
#: The local backend answers at once; the Slurm backend runs the work as jobs on the node and
#: answers None ("not known yet") until they have reported (see NodeCacheAgent)
CachesOf = Callable[[str], NodeCacheAgent | None]


class ReportedByBackend(CacheError):
    """Raised by a :data:`CachesOf` for a node whose backend reports its caches itself (Fluid
    on Kubernetes, :mod:`gpuaas.service.fluid_warm`): its preloads are left to that report."""


def _evict(caches_of: CachesOf, node: str, tenant: str, name: str) -> None:
    try:
        files = caches_of(node)
    except CacheError:
        return
    if files is not None:
        files.evict(node, tenant, name)


def footprint(row: DatasetRow) -> int:
    """What the dataset takes in a node's cache."""
    return row.cache_bytes or row.size_bytes


def warm_sets(session: Session) -> dict[DatasetKey, list[str]]:
    """Every registered dataset and the nodes where it is warm (empty: nowhere)."""
    out: dict[DatasetKey, list[str]] = {}
    for tenant, name in session.execute(
        select(Tenant.name, DatasetRow.name).join(Tenant, Tenant.id == DatasetRow.tenant_id)
    ):
        out[(tenant, name)] = []
    rows = session.execute(
        select(Tenant.name, DatasetRow.name, DatasetCache.node)
        .join(DatasetRow, DatasetRow.id == DatasetCache.dataset_id)
        .join(Tenant, Tenant.id == DatasetRow.tenant_id)
        .where(DatasetCache.state == WARM)
    )
    for tenant, name, node in rows:
        out.setdefault((tenant, name), []).append(node)
    return out


def _tenant_name(session: Session, row: DatasetRow) -> str:
    return str(session.scalar(select(Tenant.name).where(Tenant.id == row.tenant_id)))


def _make_room(
    session: Session, node: str, keep: DatasetCache, capacity: int, caches_of: CachesOf
) -> None:
    """Evict the least recently used warm datasets on ``node`` until ``keep`` fits."""
    rows = session.execute(
        select(DatasetCache, DatasetRow)
        .join(DatasetRow, DatasetRow.id == DatasetCache.dataset_id)
        .where(DatasetCache.node == node, DatasetCache.state == WARM)
        .order_by(DatasetCache.used_at.desc(), DatasetCache.id.desc())
    ).all()
    order = [(c, d) for c, d in rows if c.id == keep.id] + [
        (c, d) for c, d in rows if c.id != keep.id
    ]
    used = 0
    for cache, dataset in order:  # the one just warmed first, then the most recently used
        take = cache.size_bytes or footprint(dataset)
        if used + take <= capacity:
            used += take
            continue
        _evict(caches_of, node, _tenant_name(session, dataset), dataset.name)
        session.delete(cache)


def _turn_warm(
    session: Session,
    cache: DatasetCache,
    dataset: DatasetRow,
    size: int,
    source: str,
    now: float,
    capacity: int,
    caches_of: CachesOf,
) -> None:
    take = size or footprint(dataset)
    if take > capacity:
        cache.state, cache.error = (
            FAILED,
            (f"needs {take} bytes, more than node {cache.node}'s dataset cache ({capacity} bytes)"),
        )
        _evict(caches_of, cache.node, _tenant_name(session, dataset), dataset.name)
        return
    cache.state, cache.source, cache.size_bytes, cache.error = WARM, source, size, ""
    cache.warm_at, cache.used_at = now, now
    session.flush()
    _make_room(session, cache.node, cache, capacity, caches_of)


def run_preloads(session: Session, now: float, capacity: int, caches_of: CachesOf) -> bool:
    """Run the preloads asked for (see the module docstring); True when any ran."""
    pending = session.execute(
        select(DatasetCache, DatasetRow)
        .join(DatasetRow, DatasetRow.id == DatasetCache.dataset_id)
        .where(DatasetCache.state == LOADING)
        .order_by(DatasetCache.id)
    ).all()
    ran = False
    for cache, dataset in pending:
        size: int | None = 0
        try:
            files = caches_of(cache.node)
            if files is not None:
                tenant = _tenant_name(session, dataset)
                size = files.fill(cache.node, tenant, dataset.name, dataset.uri)
        except ReportedByBackend:
            continue
        except (CacheError, OSError) as exc:
            cache.state, cache.error, ran = FAILED, str(exc), True
            continue
        if size is None:  # running on the node: asked again at the next step
            continue
        _turn_warm(session, cache, dataset, size, BY_PRELOAD, now, capacity, caches_of)
        ran = True
    if ran:
        bump(session)
    return ran


def mark_warm(
    session: Session,
    dataset: DatasetRow,
    nodes: Iterable[str],
    source: str,
    now: float,
    capacity: int,
    caches_of: CachesOf,
) -> None:
    """``nodes`` hold ``dataset`` now (checked first on a backend with node caches)."""
    tenant = _tenant_name(session, dataset)
    for node in dict.fromkeys(nodes):
        try:
            files = caches_of(node)
        except CacheError:  # no way to tell whether the files are there: not warm
            continue
        size: int | None = 0
        if files is not None:
            size = files.held(node, tenant, dataset.name, dataset.uri)
            if size is None:
                continue
        cache = session.scalar(
            select(DatasetCache).where(
                DatasetCache.dataset_id == dataset.id, DatasetCache.node == node
            )
        )
        if cache is None:
            cache = DatasetCache(
                dataset_id=dataset.id,
                node=node,
                state=WARM,
                source=source,
                size_bytes=size,
                error="",
                warm_at=now,
                used_at=now,
            )
            session.add(cache)
        _turn_warm(session, cache, dataset, size, source, now, capacity, caches_of)
    bump(session)


def warm_after_jobs(
    session: Session, job_ids: Sequence[int], now: float, capacity: int, caches_of: CachesOf
) -> None:
    """The nodes of the succeeded jobs ``job_ids`` that read a dataset hold it warm now."""
    if not job_ids:
        return
    for job in session.scalars(select(Job).where(Job.id.in_(job_ids))):
        ref = (job.spec or {}).get("dataset")
        if not ref:
            continue
        dataset = find(session, job.tenant_id, str(ref.get("name")))
        if dataset is None:  # deleted meanwhile
            continue
        nodes = [str(p.get("node")) for p in job.placement or () if p.get("node")]
        mark_warm(session, dataset, nodes, BY_JOB, now, capacity, caches_of)


def verify(session: Session, caches_of: CachesOf) -> bool:
    """The backends' report: every warm cache on a node whose backend keeps node caches is
    checked against the files there; one whose files are gone (or whose source changed) is
    forgotten. True while some answer is still to come (a check running on its node: ask
    again at the next step)."""
    gone = waiting = False
    rows = session.execute(
        select(DatasetCache, DatasetRow, Tenant.name)
        .join(DatasetRow, DatasetRow.id == DatasetCache.dataset_id)
        .join(Tenant, Tenant.id == DatasetRow.tenant_id)
        .where(DatasetCache.state == WARM)
    ).all()
    for cache, dataset, tenant in rows:
        try:
            files = caches_of(cache.node)
        except CacheError:
            continue
        held = None if files is None else files.check(cache.node, tenant, dataset.name, dataset.uri)
        if held is False:
            session.delete(cache)
            gone = True
        elif files is not None and held is None:  # being checked on the node
            waiting = True
    if gone:
        bump(session)
    return waiting


#: seconds between two checks of the warm caches' files (the backends' report)
VERIFY_EVERY = 30.0


class WarmSync:
    """The reconciler's dataset step: run the preloads asked for, check the warm caches' files
    now and then, and give the engine the warm sets whenever they changed (or the engine was
    rebuilt), in place (:meth:`AdmissionScheduler.datasets_changed`); after the step's writes,
    the nodes of the jobs that read a dataset and succeeded turn warm (:meth:`after`)."""

    def __init__(self, db: Database, capacity: int, caches_of: CachesOf) -> None:
        self.db = db
        self.capacity = capacity
        self.caches_of = caches_of
        self._seen: tuple[int, str] | None = None  # (the warm sets given to, the version)
        self._verified_at = -math.inf
        self._checking = False  # checks still running on their nodes (asked each step)

    def step(self, scheduler: AdmissionScheduler, now: float) -> None:
        pool = scheduler.engine.pool
        if pool is None:
            return
        with self.db.session() as session:
            loading = session.scalar(
                select(DatasetCache.id).where(DatasetCache.state == LOADING).limit(1)
            )
        verify_now = self._checking or now - self._verified_at >= VERIFY_EVERY
        if loading is not None or verify_now:
            from gpuaas.service.jobs import serialized_writes  # jobs imports this module

            with serialized_writes(self.db.engine), self.db.session() as session:
                if loading is not None:
                    run_preloads(session, now, self.capacity, self.caches_of)
                if verify_now:
                    self._checking = verify(session, self.caches_of)
                    if not self._checking:
                        self._verified_at = now
        with self.db.session() as session:
            seen = (id(pool.warm), version(session))
            if seen == self._seen:
                return
            warm: dict[DatasetKey, list[str]] = {k: [] for k in pool.warm.datasets()}
            warm.update(warm_sets(session))
        scheduler.datasets_changed(warm)
        self._seen = seen

    def after(self, session: Session, succeeded: Sequence[int], now: float) -> None:
        warm_after_jobs(session, succeeded, now, self.capacity, self.caches_of)
