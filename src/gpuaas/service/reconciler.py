"""The reconciler: runs the admission engine on the live state and follows jobs to their end.

One process leads (PostgreSQL: an advisory lock held on a dedicated connection; SQLite: an
exclusive file lock next to the database, so a second server on the same file serves the API
but does not reconcile). The leader keeps an in-memory
:class:`~gpuaas.engine.admission.AdmissionEngine` and, every ``reconcile_interval`` seconds,
runs one :meth:`Reconciler.step`:

1. sync the database into the engine: on the first step, and whenever ``governance.version``
   moved, rebuild the engine, re-admitting every admitted or running job on exactly the devices
   it holds (jobs on draining nodes, or whose devices are gone, are requeued), then loading the
   pending backlog in queue order over this and the next steps, admitting as it goes
   (:mod:`gpuaas.service.backlog`: a new leader admits at once, whatever the backlog); when only
   ``fleet.version`` moved, apply the fleet's diff (added, removed, cordoned, drained,
   repartitioned nodes) to the running engine in place: only the jobs that lost their devices
   are requeued, every other job keeps its reservation; then pick up new pending jobs and
   cancellations;
2. run admission; write admissions (ClusterQueue, flavors, per-pod devices) and evictions
   (Preempted, then Pending again with one more attempt), each with its event;
3. hand admitted jobs to the backend, poll it, and write Running / Succeeded / Failed; a job
   past its ``maxRunTime`` is stopped and Failed; a job the backend lost is requeued.

Every write carries a structured reason (:mod:`gpuaas.engine.reasons`): the job row keeps its
code and fields beside the sentence. What a step decides before it stores anything is a list of
typed writes (:class:`Fail`, :class:`Cancel`, :class:`Requeue`, :class:`Start`,
:class:`Finish`), stored by :meth:`Reconciler._apply`; a requeue carries its cause
(``NodeDrained``, ``NodeRemoved``, ``DeviceLost``, ``BackendLost``), and so does its count in
``gpuaas_evictions``.

Writes are conditional on the state the reconciler expects (see
:func:`gpuaas.service.jobs.transition`): a job cancelled by the API while it was being admitted
stays cancelled and its quota is given back. If a step fails, the engine is dropped and rebuilt
from the database on the next one, so memory never drifts from what is stored.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeAlias

from sqlalchemy import Connection, bindparam, func, select, text, update
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from gpuaas.backends.base import Backend, BackendEvent, BackendJob, EventKind
from gpuaas.backends.dataset_cache import CacheError, NodeCacheAgent
from gpuaas.backends.kubernetes.backend import KubernetesBackend
from gpuaas.engine.admission import AdmissionEngine, fleet_diff
from gpuaas.engine.admission.gpu_size import gpu_milli
from gpuaas.engine.admission.restore import (
    PlacementLost,
    Recorded,
    pods_in,
    readmit,
    record,
    typed_pods,
)
from gpuaas.engine.admission.state import AdmittedWorkload
from gpuaas.engine.reasons import (
    CANCELLED,
    SPEC_UNREADABLE,
    WAITING_FOR_ADMISSION,
    Code,
    Reason,
    reason,
)
from gpuaas.engine.replica_names import ReplicaBook
from gpuaas.engine.scheduling import Decisions
from gpuaas.engine.scheduling.admission import AdmissionScheduler
from gpuaas.model.errors import InvalidValue
from gpuaas.model.governance import AdmissionWorkload
from gpuaas.model.job_state import ACTIVE, UNFINISHED, JobState
from gpuaas.model.node import Node
from gpuaas.model.placement import PodPlacement as TypedPod
from gpuaas.service import usage, usage_volumes
from gpuaas.service.autoscaler import Autoscaler
from gpuaas.service.backend_driver import BackendDriver
from gpuaas.service.backends import Backends, backend_of_node
from gpuaas.service.backlog import PENDING_COLUMNS, Backlog
from gpuaas.service.budget_watch import BudgetWatch
from gpuaas.service.cluster_worker import ClusterWorker
from gpuaas.service.datasets import ReportedByBackend, WarmSync
from gpuaas.service.fleet import FLEET_VERSION, load_nodes
from gpuaas.service.fluid_warm import FluidSync
from gpuaas.service.governance import GOVERNANCE_VERSION, load_governance
from gpuaas.service.idle_pool import IdlePool
from gpuaas.service.jobs import serialized_writes, stored_reason, transition, workload_of
from gpuaas.service.pending_reasons import store_reasons_pg
from gpuaas.service.replica_scaler import ReplicaScaler
from gpuaas.service.settings import Settings
from gpuaas.service.telemetry import Telemetry
from gpuaas.service.telemetry_feed import TelemetryFeed
from gpuaas.service.utilisation import PUBLISHED_FILE, Utilisation, publish
from gpuaas.service.webhooks import WebhookSender
from gpuaas.service.write_chunks import WriteChunks
from gpuaas.store.db import LEADER_LOCK_KEY, Database
from gpuaas.store.sqlite_trace import span
from gpuaas.store.tables import Job, Meta, NodeRow, Tenant

log = logging.getLogger("gpuaas.reconciler")
K8S = KubernetesBackend.name

_CHUNK = 500
#: Seconds between writes of pending jobs' reasons.
REASONS_EVERY = 2.0
REASONS_BATCH = 200
REASONS_PER_STEP = 1000
#: Seconds between full comparisons of the pending jobs in the database and in the engine;
#: between them a step reads only jobs submitted since the last one.
SWEEP_EVERY = 2.0
_JOBS = Job.__table__


# --- leadership ---------------------------------------------------------------------------


class Leadership:
    """Whether this process may reconcile: a PostgreSQL advisory lock or a SQLite file lock."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.held = False
        self._file: int | None = None
        self._conn: Connection | None = None

    def _lock_path(self) -> Path | None:
        database = make_url(self.db.url).database
        if not database or database == ":memory:":
            return None
        return Path(database).expanduser().with_name(Path(database).name + ".leader")

    def hold(self) -> bool:
        """True while this process leads; tries to become leader when it does not."""
        if self.held:
            if self._conn is not None and not self._still_connected():
                self.release()
            return self.held
        if self.db.is_sqlite:
            self.held = self._lock_file()
        else:
            self.held = self._lock_postgres()
        return self.held

    def _lock_file(self) -> bool:
        path = self._lock_path()
        if path is None:
            return True
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._file = fd
        return True

    def _lock_postgres(self) -> bool:
        conn = self.db.engine.connect()
        try:
            got = bool(
                conn.execute(
                    text("SELECT pg_try_advisory_lock(:k)"), {"k": LEADER_LOCK_KEY}
                ).scalar()
            )
            conn.commit()
        except Exception:
            conn.close()
            raise
        if not got:
            conn.close()
            return False
        self._conn = conn
        return True

    def _still_connected(self) -> bool:
        assert self._conn is not None
        try:
            self._conn.execute(text("SELECT 1"))
            self._conn.commit()
            return True
        except Exception:
            log.warning("lost the leader connection; stepping down")
            return False

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            os.close(self._file)
            self._file = None
        if self._conn is not None:
            try:
                self._conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": LEADER_LOCK_KEY})
                self._conn.commit()
            except Exception:
                pass  # the connection is gone: so is the lock
            finally:
                self._conn.close()
                self._conn = None
        self.held = False


# --- what the reconciler remembers of each job it follows ---------------------------------


@dataclass(slots=True)
class Tracked:
    id: int
    tenant: str
    queue: str
    workload: AdmissionWorkload
    spec: dict[str, Any]
    state: JobState
    queued_since: float
    reason: Reason = WAITING_FOR_ADMISSION
    cluster_queue: str | None = None
    started_at: float | None = None
    placement: list[dict[str, Any]] | None = None
    attempt: int = 0
    note: Reason | None = None  # a reason written on the admitted job (backend unreachable)

    def requeued(self, at: float, cause: Reason) -> None:
        """The job is pending again from ``at`` after losing its place for ``cause``."""
        self.state = JobState.PENDING
        self.queued_since = at
        self.cluster_queue = None
        self.started_at = None
        self.placement = None
        self.attempt += 1
        self.note = None
        self.reason = _requeued(cause)

    @property
    def max_run_time(self) -> float | None:
        value = self.spec.get("maxRunTime")
        return None if value is None else float(value)


def _stored(job: Job) -> Reason:
    """The reason a job's row holds (a row written before reasons were structured holds only
    its sentence: then the reason it waits for is not known yet)."""
    return Reason.stored(job.reason_code, job.reason_fields) or WAITING_FOR_ADMISSION


def _requeued(cause: Reason) -> Reason:
    """The reason of a job queued again after losing its place for ``cause``."""
    return Reason(Code.REQUEUED, {"cause": cause.code.value})


# --- what a step stores: typed writes, applied by Reconciler._apply -------------------------


@dataclass(frozen=True, slots=True)
class Fail:
    """The job cannot go on (unreadable spec, refused by the governance): Failed."""

    job_id: int
    states: tuple[str, ...]
    at: float
    reason: Reason


@dataclass(frozen=True, slots=True)
class Cancel:
    """The user cancelled the job (or the replica scaler removed it, ``reason`` saying why):
    Cancelled, and stopped on the backend."""

    job_id: int
    states: tuple[str, ...]
    at: float
    reason: Reason = CANCELLED


@dataclass(frozen=True, slots=True)
class Requeue:
    """The job lost its nodes outside admission (``reason``: one of
    :data:`~gpuaas.engine.reasons.REQUEUE_CODES`): Preempted, then Pending again."""

    job_id: int
    state: str
    cluster_queue: str | None
    at: float
    reason: Reason


@dataclass(frozen=True, slots=True)
class Start:
    """The backend started the job: Running."""

    job_id: int
    at: float
    backend: str


@dataclass(frozen=True, slots=True)
class Finish:
    """The job ended (``state``: Succeeded or Failed) while in ``source``."""

    job_id: int
    source: JobState
    state: JobState
    at: float
    reason: Reason


@dataclass(frozen=True, slots=True)
class Note:
    """A new reason on an admitted job that stays where it is (its backend cannot be reached)."""

    job_id: int
    state: JobState
    reason: Reason


Write: TypeAlias = Fail | Cancel | Requeue | Start | Finish | Note


def _held_milli(wl: AdmissionWorkload) -> int:
    return sum(gpu_milli(ps.requests) * ps.count for ps in wl.pod_sets)


def _flavor_names(flavors: dict[str, dict[str, str]]) -> list[str]:
    return sorted({f for resources in flavors.values() for f in resources.values()})


class Reconciler:
    """See the module docstring. ``backend``, when given, is the default backend (the one of
    nodes that name none); otherwise ``settings.backend`` is, built on first use. ``backends``
    are further backends already built (others are built from the settings on first use)."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        telemetry: Telemetry | None = None,
        backend: Backend | None = None,
        backends: Iterable[Backend] = (),
        utilisation: Utilisation | None = None,
    ) -> None:
        self.db = db
        self.settings = settings
        self.telemetry = telemetry or Telemetry()
        built = [*([backend] if backend is not None else []), *backends]
        self.backends = Backends(settings, built)
        if backend is not None:
            self.backends.default = backend.name
        self._drivers: dict[str, BackendDriver] = {}
        self._runs_on: dict[int, str] = {}  # job id -> the backend it was launched on
        self._replicas = ReplicaBook()
        self.engine: AdmissionEngine | None = None
        self._scheduler: AdmissionScheduler | None = None
        self.jobs: dict[int, Tracked] = {}
        self._versions: tuple[str, str] | None = None
        self._reasons_at = -math.inf
        self._tenants: dict[int, str] = {}
        self._seen_id = 0  # the highest job id taken into the engine
        self._backlog: Backlog | None = None  # pending jobs a new engine has still to load
        self._swept_at = -math.inf
        self._leadership = Leadership(db)
        self._datasets = WarmSync(db, settings.dataset_cache_bytes, self._caches_of)
        self._fluid = FluidSync(db, settings.dataset_cache_bytes, self._caches_of,
                                self._fluid_nodes)  # fmt: skip
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._metered_at = -math.inf
        #: tenant clusters' provisioning, beside admission (a thread of its own, leader only)
        self.clusters = ClusterWorker(db, settings, is_leader=lambda: self.is_leader)
        #: GPU utilisation windows (docs/telemetry.md), fed every telemetry_interval
        self.utilisation = utilisation or Utilisation.of(settings)
        # metering (service/usage.py): records carry the windows' measured utilisation
        usage.configure(db.url, enabled=settings.metering, reader=self.utilisation)
        self._telemetry_feed = TelemetryFeed(self.utilisation, settings,
                                             self.telemetry.dcgm_scrapes_counted)  # fmt: skip
        #: inference jobs' replicas (docs/workload-autoscaling.md), read from the windows
        self._replica_scaler = ReplicaScaler(db)
        #: the cluster autoscaler (docs/autoscaling.md), a thread of its own, leader only
        self.autoscaler = Autoscaler(db, settings, self.utilisation,
                                     is_leader=lambda: self.is_leader)  # fmt: skip
        #: the idle-capacity pool's loop (docs/idle-pool.md), stepped at the end of each step
        self.idle_pool = IdlePool(db, self.backends.default, self._checkpoint, self.telemetry)
        #: budgets: what they hold before each cycle, their alerts (webhooks: a thread)
        self.budgets = BudgetWatch(db, WebhookSender(db))
        self._held: dict[int, Reason] = {}  # pending jobs a budget holds out of the engine
        self._held_by: AdmissionScheduler | None = None

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self._leadership.held

    def start(self) -> None:
        """Reconcile in a background thread every ``settings.reconcile_interval`` seconds."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="gpuaas-reconciler", daemon=True)
        self._thread.start()
        self.clusters.start()
        self.autoscaler.start()

    @property
    def backend(self) -> Backend:
        """The default backend (nodes that name none run their jobs there)."""
        return self.backends.get(self.backends.default)

    def driver(self, name: str) -> BackendDriver:
        """The driver of backend ``name`` (built with the backend on first use)."""
        driver = self._drivers.get(name)
        if driver is None:
            driver = BackendDriver(self.backends.get(name), self.telemetry,
                                   poll_interval=self.settings.reconcile_interval)  # fmt: skip
            self._drivers[name] = driver
        return driver

    def stop(self) -> None:
        self._stop.set()
        self.clusters.stop()
        self.autoscaler.stop()
        self._telemetry_feed.stop()
        self.budgets.sender.stop()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        for driver in self._drivers.values():
            driver.stop()
        self._drivers = {}
        self._leadership.release()
        self.engine = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step(time.time())
            except Exception:
                log.exception("reconcile step failed; the engine is rebuilt on the next step")
            self._stop.wait(self.settings.reconcile_interval)

    def step(self, now: float) -> bool:
        """One pass (see the module docstring); False when another process leads."""
        was_leader = self._leadership.held
        if not self._leadership.hold():
            self.engine = None
            return False
        if not was_leader:
            self.engine = None  # whatever happened while another process led: start afresh
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            with span("step"):
                self._step(now)
        except BaseException:
            self.engine = None
            raise
        finally:
            # the CPU interval inside the wall one: CPU clock read first at the end
            used = time.thread_time() - cpu
            self.telemetry.cycle_seconds.observe(time.perf_counter() - started)
            self.telemetry.cycle_cpu_seconds.observe(used)
        return True

    # --- one step -------------------------------------------------------------------------

    def _step(self, now: float) -> None:
        with span("sync"), self.db.sessions() as session:
            versions = (_meta(session, GOVERNANCE_VERSION), _meta(session, FLEET_VERSION))
            if self.engine is None or self._versions is None or versions[0] != self._versions[0]:
                writes = self._rebuild(session, versions, now)
            else:
                writes = self._sync(session, now, versions)
        assert self.engine is not None
        scheduler = self.scheduler(self.engine)
        self._fluid.step(now)  # Fluid's preloads and warm caches on Kubernetes nodes
        self._datasets.step(scheduler, now)  # preloads, and the warm sets into the engine
        # what finished since the last step frees quota for this step's admission
        for driver in list(self._drivers.values()):
            self._backend_events(driver, driver.events(now), writes)
        self._note_unavailable(writes)
        self._enforce_max_run_time(now, writes)
        self._scale_replicas(now, writes)
        self._hold_over_budget(scheduler, now, writes)
        with span("cycle"):
            decisions = scheduler.cycle(now)
        stops: list[int] = []
        # on SQLite in short transactions, so that submissions do not wait for the whole step
        # (service/write_chunks.py); a boundary falls only between independent writes
        with WriteChunks(self.db) as chunks:
            for write in writes:
                self._apply(chunks.session, write, stops)
                chunks.boundary()
            succeeded = [
                w.job_id for w in writes if isinstance(w, Finish) and w.state is JobState.SUCCEEDED
            ]
            self._datasets.after(chunks.session, succeeded, now)  # their nodes hold their dataset
            chunks.boundary()
            if self._preemptors_left(chunks.session, decisions):
                # a job cancelled since the last sweep made room by evicting others: store
                # none of this step's decisions and rebuild from the database next step
                self.engine = None
                launches = []
            else:
                self._write_evictions(chunks.session, now, stops, decisions)
                launches = self._write_admissions(chunks, now, decisions)
        if self.engine is not None:
            with span("reasons"):
                self._write_reasons(now)
            with span("meter"):
                self._meter(now)
        for job_id in stops:
            self._stop_on_backend(job_id)
        for name, job in launches:
            self._runs_on[job.id] = name
            self.driver(name).launch(job)  # it starts at the backend's next poll
        try:
            self.idle_pool.step(now)
        except Exception:
            log.exception("idle pool step failed; it is tried again")
        if self.engine is not None and self._telemetry_feed.due(now):
            try:
                self._feed_telemetry(now)
            except Exception:  # telemetry never costs a step its admissions
                log.exception("feeding the utilisation windows failed")

    def _feed_telemetry(self, now: float) -> None:
        """The utilisation windows: the fleet, who holds what, the backends' samples."""
        assert self.engine is not None
        if self.engine.pool is None:
            return
        default = self.backends.default
        built = {b.name: b for b in self.backends.built()}  # never built here just for this
        held = ((t.id, t.tenant, t.spec, t.placement) for t in self.jobs.values()
                if t.state in ACTIVE and t.placement)  # fmt: skip
        self._telemetry_feed.step(
            now, (id(self.engine), self._versions, tuple(sorted(built))), self.engine.pool.nodes,
            lambda n: built.get(backend_of_node(n, default)), held, self._node,
        )  # fmt: skip
        if self.settings.reconciler_process:  # the API's process reads them from the file
            publish(self.utilisation, self.settings.data_dir / PUBLISHED_FILE)

    def _scale_replicas(self, now: float, writes: list[Write]) -> None:
        """Autoscaled inference jobs (:mod:`gpuaas.service.replica_scaler`): new replicas are
        submitted as jobs (queued by the next sync); the ones it removes or spills leave the
        engine here and are stopped as cancelled with its reason, before this step's cycle."""
        assert self.engine is not None
        scheduler = self.scheduler(self.engine)
        why = self.engine.why

        def state_of(job_id: int) -> JobState | None:
            tracked = self.jobs.get(job_id)
            return None if tracked is None else tracked.state

        def waiting(job_id: int) -> Reason | None:
            tracked = self.jobs.get(job_id)
            return why.get(str(job_id), tracked.reason if tracked is not None else None)

        for stop in self._replica_scaler.step(now, self.utilisation, state_of, waiting):
            tracked = self.jobs.pop(stop.job_id, None)
            states: tuple[str, ...] = tuple(UNFINISHED)
            if tracked is not None:
                states = (tracked.state,)
                if tracked.state is JobState.PENDING:
                    scheduler.withdraw(str(stop.job_id))
                else:
                    scheduler.finish(str(stop.job_id))
            writes.append(Cancel(stop.job_id, states, now, stop.reason))

    def _meter(self, now: float) -> None:
        """Running jobs' usage up to the last whole hour, every ``usage.STEP_EVERY`` seconds
        (cost-to-date stays current without a write per job per step)."""
        if now - self._metered_at < usage.STEP_EVERY:
            return
        self._metered_at = now
        with serialized_writes(self.db.engine), self.db.session() as session:
            usage.step(session, now)
            usage_volumes.step(session, now)  # storage GB-hours (service/usage_volumes.py)

    def scheduler(self, engine: AdmissionEngine) -> AdmissionScheduler:
        """The one scheduling path over ``engine`` (the admission strategy; a rebuilt engine
        gets a new one). Every step cycles, even when nothing arrived: decisions may depend on
        time (a minimum run time)."""
        if self._scheduler is None or self._scheduler.engine is not engine:
            self._scheduler = AdmissionScheduler(engine)
        return self._scheduler

    # --- sync: database -> engine ---------------------------------------------------------

    def _rebuild(self, session: Session, versions: tuple[str, str], now: float) -> list[Write]:
        """A fresh engine from the database; returns writes for jobs it could not keep."""
        gov, config = load_governance(session)
        config = replace(config, pods_per_cycle=self.settings.admission_pods_per_cycle)
        nodes = load_nodes(session)
        draining = set(session.scalars(select(NodeRow.name).where(NodeRow.draining.is_(True))))
        engine = AdmissionEngine(gov, config, nodes)
        self.jobs = {}
        self._replicas = ReplicaBook()
        self._tenants = dict(session.execute(select(Tenant.id, Tenant.name)).all())
        writes: list[Write] = []
        active = session.scalars(
            select(Job).where(Job.state.in_([s.value for s in ACTIVE])).order_by(Job.admitted_at)
        )
        for job in active:
            tracked = self._track(job)
            if tracked is None:
                writes.append(self._fail_write(job.id, (job.state,), now, SPEC_UNREADABLE))
                continue
            on = sorted({p.get("node") for p in job.placement or [] if p.get("node") in draining})
            lost: Reason | None = None
            if job.cancel_requested:
                writes.append(self._cancel_write(job.id, (job.state,), now))
                continue
            if on:
                lost = reason(Code.NODE_DRAINED, nodes=on)
            else:
                try:
                    readmit(engine, tracked.workload, job.flavors or {}, job.admitted_at or now,
                            job.placement)  # fmt: skip
                except (PlacementLost, InvalidValue) as exc:
                    code = exc.code if isinstance(exc, PlacementLost) else Code.DEVICE_LOST
                    lost = reason(code, detail=str(exc))
            if lost is not None:
                requeue = self._requeue_write(job.id, job.state, job.cluster_queue, now, lost)
                writes.append(requeue)
                tracked.state = JobState.PENDING
                tracked.queued_since = now
                if not self._queue(engine, tracked, writes, now):
                    continue
            else:
                tracked.state = JobState(job.state)
                tracked.cluster_queue = job.cluster_queue
                tracked.started_at = job.started_at
                tracked.placement = job.placement
            self.jobs[job.id] = tracked
            if tracked.placement:
                self._replicas.name(job.id, tracked.attempt, tracked.placement, self._alive)
        # the pending backlog streams in over this and the next steps (service/backlog.py)
        self._backlog = Backlog(session, self.jobs)
        self._seen_id = session.scalar(select(func.max(Job.id))) or 0
        self.engine = engine
        self._load_backlog(session, now, writes)
        self._swept_at = now  # every pending job is in the plan: no sweep due yet
        self._versions = versions
        self._resume_backend(writes, now)
        return writes

    def _resume_backend(self, writes: list[Write], now: float) -> None:
        """Make the backends follow exactly the admitted and running jobs (after a restart too:
        a backend finds its running jobs again from their start time and attempt)."""
        active: dict[str, list[Tracked]] = {}
        for tracked in self.jobs.values():
            if tracked.state in ACTIVE:
                name = self._backend_name(tracked)
                if name is None:
                    self._reject_spanning(tracked, now, writes)
                else:
                    active.setdefault(name, []).append(tracked)
        for name in set(active) | set(self._drivers) | {self.backends.default}:
            driver = self.driver(name)
            jobs = active.get(name, [])
            driver.adopt(t.id for t in jobs)
            following = driver.following()
            for tracked in jobs:
                self._runs_on[tracked.id] = name
                if tracked.id not in following:
                    driver.launch(self._backend_job(tracked))

    def _apply_fleet(self, session: Session, now: float) -> list[Write]:
        """Apply the stored fleet's diff to the running engine in place (see
        :func:`gpuaas.engine.admission.fleet_diff`); returns requeue writes for the jobs that
        lost their devices (a removed or drained node, a repartition that took their devices)."""
        assert self.engine is not None and self.engine.pool is not None
        engine = self.engine
        nodes = load_nodes(session)
        draining = frozenset(
            session.scalars(select(NodeRow.name).where(NodeRow.draining.is_(True)))
        )
        before = [node for node in engine.pool.nodes if node is not None]
        displaced = self.scheduler(engine).nodes_changed(fleet_diff(before, nodes, draining))
        writes: list[Write] = []
        for moved in displaced:
            tracked = self.jobs.get(int(moved.workload))
            if tracked is None:
                continue
            writes.append(
                self._requeue_write(
                    tracked.id, tracked.state, tracked.cluster_queue, now, moved.reason
                )
            )
            tracked.requeued(now, moved.reason)
        return writes

    def _sync(
        self, session: Session, now: float, versions: tuple[str, str] | None = None
    ) -> list[Write]:
        """Fleet changes (when ``versions`` says the fleet moved), new pending jobs, pending
        jobs cancelled by the API, and cancel requests."""
        assert self.engine is not None
        engine = self.engine
        writes: list[Write] = []
        if self._backlog is not None:
            self._load_backlog(session, now, writes)
        if self._backlog is not None:  # still loading: the sweep comes once all is loaded
            new = []
        elif now - self._swept_at >= SWEEP_EVERY:
            new = self._sweep(session, engine, now)
        else:  # only what was submitted since the last step: ids grow
            new = list(
                session.scalars(
                    select(Job.id).where(
                        Job.id > self._seen_id, Job.state == JobState.PENDING.value
                    )
                )
            )
        if new:
            self._seen_id = max(self._seen_id, *new)
        new.sort()
        for i in range(0, len(new), _CHUNK):
            chunk = new[i : i + _CHUNK]
            # core rows, not ORM objects: a busy queue brings hundreds of jobs per step
            for job in session.execute(
                select(*PENDING_COLUMNS).where(_JOBS.c.id.in_(chunk)).order_by(_JOBS.c.id)
            ):
                if job.state == JobState.PENDING.value and job.id not in self.jobs:
                    self._add_pending(engine, job, writes, now)  # type: ignore[arg-type]
        cancelled = session.scalars(
            select(Job.id).where(Job.cancel_requested.is_(True), Job.state.in_(UNFINISHED))
        )
        for job_id in cancelled:
            tracked = self.jobs.pop(job_id, None)
            if tracked is None:
                continue
            if tracked.state is JobState.PENDING:  # asked while admitted, then preempted
                self.scheduler(engine).withdraw(str(job_id))
            else:
                self.scheduler(engine).finish(str(job_id))
            writes.append(self._cancel_write(job_id, (tracked.state,), now))
        if versions is not None and self._versions is not None and versions != self._versions:
            # after the sweep: a job requeued here is Pending in memory before it is in the
            # database, and the sweep would take it for one cancelled while pending
            writes.extend(self._apply_fleet(session, now))
            self._versions = versions
        return writes

    @property
    def loaded(self) -> bool:
        """Whether the engine holds every pending job of the database it has seen (a new
        leader loads its backlog over its first steps: :mod:`gpuaas.service.backlog`)."""
        return self.engine is not None and self._backlog is None

    def _load_backlog(self, session: Session, now: float, writes: list[Write]) -> None:
        """Queue the backlog's next pending jobs for ``settings.backlog_budget`` seconds of CPU
        (a quarter of that in the rebuild's own step: its first admission comes sooner); once
        it is all loaded, sweep at once (what was submitted or cancelled meanwhile)."""
        assert self.engine is not None and self._backlog is not None
        engine, backlog = self.engine, self._backlog
        budget = self.settings.backlog_budget / (4 if backlog.loaded == 0 else 1)
        for job in backlog.rows(session, budget):
            if job.id not in self.jobs:
                self._add_pending(engine, job, writes, now)  # type: ignore[arg-type]
        if backlog.done:
            self._backlog = None
            self._swept_at = -math.inf
            engine.loaded_until = None
        else:
            engine.loaded_until = backlog.boundary

    def _sweep(self, session: Session, engine: AdmissionEngine, now: float) -> list[int]:
        """Every pending job id against the engine's: drop the ones that left Pending (cancelled
        through the API), return the ones the engine does not know (including a job whose
        smaller id committed after a larger one was seen)."""
        self._swept_at = now
        pending_now = set(
            session.scalars(select(Job.id).where(Job.state == JobState.PENDING.value))
        )
        for job_id, tracked in list(self.jobs.items()):
            if tracked.state is JobState.PENDING and job_id not in pending_now:
                self.scheduler(engine).withdraw(str(job_id))  # cancelled (or failed) while pending
                del self.jobs[job_id]
        return list(pending_now - set(self.jobs))

    def _track(self, job: Job) -> Tracked | None:
        try:
            workload = workload_of(job)
        except (KeyError, TypeError, ValueError):
            return None
        tenant = self._tenants.get(job.tenant_id)
        if tenant is None:
            with self.db.sessions() as s:
                self._tenants = dict(s.execute(select(Tenant.id, Tenant.name)).all())
            tenant = self._tenants.get(job.tenant_id, str(job.tenant_id))
        since = job.updated_at if job.attempts else job.created_at
        return Tracked(
            job.id, tenant, job.local_queue, workload, dict(job.spec), JobState(job.state),
            since, reason=_stored(job), attempt=job.attempts or 0,
        )  # fmt: skip

    def _add_pending(
        self, engine: AdmissionEngine, job: Job, writes: list[Write], now: float
    ) -> None:
        tracked = self._track(job)
        if tracked is None:
            writes.append(self._fail_write(job.id, (job.state,), now, SPEC_UNREADABLE))
            return
        if job.cancel_requested:
            writes.append(self._cancel_write(job.id, (job.state,), now))
            return
        if self._queue(engine, tracked, writes, now):
            self.jobs[job.id] = tracked

    def _queue(
        self, engine: AdmissionEngine, tracked: Tracked, writes: list[Write], now: float
    ) -> bool:
        """Queue ``tracked`` in the engine; a job the governance can no longer take fails."""
        try:
            self.scheduler(engine).submit(tracked.workload, now)
        except InvalidValue as exc:
            writes.append(
                self._fail_write(
                    tracked.id, (JobState.PENDING,), now, reason(Code.CANNOT_QUEUE, detail=str(exc))
                )
            )
            return False
        return True

    # --- writes ---------------------------------------------------------------------------
    #
    # A step decides in memory first and stores afterwards, in one transaction: what it decided
    # is a list of :data:`Write` records, stored by :meth:`_apply`. Each is conditional on the
    # state the job was in (see :func:`~gpuaas.service.jobs.transition`).

    @staticmethod
    def _fail_write(job_id: int, states: Iterable[str], now: float, why: Reason) -> Fail:
        return Fail(job_id, tuple(str(s) for s in states), now, why)

    @staticmethod
    def _cancel_write(job_id: int, states: Iterable[str], now: float) -> Cancel:
        return Cancel(job_id, tuple(str(s) for s in states), now)

    @staticmethod
    def _requeue_write(
        job_id: int, state: str, cluster_queue: str | None, now: float, why: Reason
    ) -> Requeue:
        return Requeue(job_id, str(state), cluster_queue, now, why)

    def _apply(self, session: Session, write: Write, stops: list[int]) -> None:
        """Store one decision; ``stops`` collects the jobs the backend must stop."""
        match write:
            case Fail(job_id, states, at, why):
                if transition(session, job_id, states, JobState.FAILED, at, why, finished_at=at):
                    stops.append(job_id)
            case Cancel(job_id, states, at, why):
                transition(session, job_id, states, JobState.CANCELLED, at, why, finished_at=at)
                stops.append(job_id)
            case Requeue(job_id, state, cluster_queue, at, why):
                self._requeue(session, job_id, state, at, why)
                stops.append(job_id)
                self.telemetry.evictions.labels(cluster_queue or "", why.code.value).inc()
            case Start(job_id, at, backend):
                transition(
                    session, job_id, (JobState.ADMITTED,), JobState.RUNNING, at,
                    reason(Code.STARTED, backend=backend), started_at=at,
                )  # fmt: skip
            case Note(job_id, state, why):
                stored = stored_reason(why)
                session.execute(
                    update(Job)
                    .where(Job.id == job_id, Job.state == state.value)
                    .values(reason=why.render(), reason_code=stored["reason_code"],
                            reason_fields=stored["reason_fields"])
                )  # fmt: skip
            case Finish(job_id, source, state, at, why):
                transition(session, job_id, (source,), state, at, why, finished_at=at)

    @staticmethod
    def _requeue(session: Session, job_id: int, state: str, now: float, why: Reason) -> None:
        """Active -> Preempted (why) -> Pending ("requeued", with the cause), one more attempt."""
        if transition(session, job_id, (state,), JobState.PREEMPTED, now, why):
            transition(
                session, job_id, (JobState.PREEMPTED,), JobState.PENDING, now, _requeued(why),
                cluster_queue=None, flavors=None, placement=None, gpus=0, admitted_at=None,
                started_at=None, attempts=Job.attempts + 1,
            )  # fmt: skip

    @staticmethod
    def _preemptors_left(session: Session, decisions: Decisions) -> bool:
        """Whether a workload that evicted others this step is no longer pending in the
        database: a pending job cancelled through the API stays in the engine until the next
        sweep, and its admission write would fail after its victims were already evicted."""
        preemptors = {int(e.preemptor) for e in decisions.evicted if e.preemptor}
        if not preemptors:
            return False
        left = session.scalar(
            select(func.count())
            .select_from(Job)
            .where(Job.id.in_(preemptors), Job.state != JobState.PENDING.value)
        )
        return bool(left)

    def _write_evictions(
        self, session: Session, now: float, stops: list[int], decisions: Decisions
    ) -> None:
        for eviction in decisions.evicted:
            job_id = int(eviction.name)
            tracked = self.jobs.get(job_id)
            if tracked is None or tracked.state not in ACTIVE:
                continue  # admitted and evicted within this step: never stored as admitted
            why = Reason(Code(eviction.reason), {"preemptor_job": eviction.preemptor})
            write = self._requeue_write(job_id, tracked.state, tracked.cluster_queue, now, why)
            self._apply(session, write, stops)
            tracked.requeued(now, why)

    def _write_admissions(
        self, chunks: WriteChunks, now: float, decisions: Decisions
    ) -> list[tuple[str, BackendJob]]:
        """Store the admissions; returns what to launch, on which backend. Each admission may
        be committed apart from the next, unless this step evicted: then a preemptor's
        admission is committed with its victims' evictions (in the chunk they are in)."""
        assert self.engine is not None
        apart = not decisions.evicted
        scheduler = self.scheduler(self.engine)
        launches: list[tuple[str, BackendJob]] = []
        deferred: list[Write] = []
        for admitted in decisions.admitted:
            if apart:  # before this admission's placement is worked out, not inside its chunk
                chunks.boundary()
            aw = admitted.admission
            assert aw is not None
            name = admitted.name
            job_id = int(name)
            tracked = self.jobs.get(job_id)
            if tracked is None or tracked.state is not JobState.PENDING:
                continue
            placement = Recorded(record(aw.placement) if aw.placement is not None else [])
            self._replicas.name(job_id, tracked.attempt, placement, self._alive)
            # typed once per admission: metering (through transition) and the backend share it
            placement.typed = typed_pods(placement, self._node)
            rank = 0
            for pod in placement:  # a run of identical pods holds no device: nothing given
                pod["given"] = [[d.name, d.uuid] for d in placement.typed[rank].devices]
                rank += pods_in(pod)
            session = chunks.session
            if not transition(
                session, job_id, (JobState.PENDING,), JobState.ADMITTED, now,
                self._admission_reason(aw), cluster_queue=aw.cluster_queue, flavors=aw.flavors,
                placement=placement, gpus=_held_milli(aw.workload), admitted_at=now,
            ):  # fmt: skip
                scheduler.finish(name)  # cancelled meanwhile: give the quota and devices back
                del self.jobs[job_id]
                continue
            tracked.state = JobState.ADMITTED
            tracked.cluster_queue = aw.cluster_queue
            tracked.placement = list(placement)  # without the typed pods: kept only this step
            self.telemetry.admissions.labels(aw.cluster_queue, tracked.queue, tracked.tenant).inc()
            self.telemetry.admission_wait.labels(aw.cluster_queue).observe(
                max(0.0, now - tracked.queued_since)
            )
            name = self._backend_name(tracked)
            if name is None:
                self._reject_spanning(tracked, now, deferred)
            else:
                launches.append((name, self._backend_job(tracked, placement.typed)))
        for write in deferred:
            self._apply(chunks.session, write, [])
        return launches

    @staticmethod
    def _admission_reason(aw: AdmittedWorkload) -> Reason:
        nodes = (
            sorted({n for names in aw.placement.nodes.values() for n in names})
            if aw.placement is not None
            else []
        )
        return reason(
            Code.ADMITTED,
            cluster_queue=aw.cluster_queue,
            flavors=_flavor_names(aw.flavors),
            nodes=nodes,
        )

    def _write_reasons(self, now: float) -> None:
        """Store why pending jobs wait, where the reason changed, every REASONS_EVERY seconds
        at most (a long queue's reasons change with every admission; the API can wait)."""
        assert self.engine is not None
        if now - self._reasons_at < REASONS_EVERY:
            return
        self._reasons_at = now
        why = self.engine.why
        changed: list[tuple[int, Reason]] = []
        for job_id, tracked in self.jobs.items():
            if tracked.state is not JobState.PENDING:
                continue
            current = self._held.get(job_id) or why.get(str(job_id), WAITING_FOR_ADMISSION)
            if not current.same(tracked.reason):
                changed.append((job_id, current))
                if len(changed) >= REASONS_PER_STEP:
                    break
        rows = []
        for job_id, current in changed:  # rendered here: only the reasons that changed
            self.jobs[job_id].reason = current
            stored = stored_reason(current)
            rows.append(
                {
                    "jid": job_id,
                    "why": current.render(),
                    "rcode": stored["reason_code"],
                    "rfields": stored["reason_fields"],
                }
            )
        table = Job.__table__
        statement = (
            update(table)
            .where(table.c.id == bindparam("jid"), table.c.state == JobState.PENDING.value)
            .values(
                reason=bindparam("why"),
                reason_code=bindparam("rcode"),
                reason_fields=bindparam("rfields", type_=table.c.reason_fields.type),
            )
        )
        # in short transactions of their own: a burst of submissions changes thousands of
        # reasons at once, and one long write would hold up every submission behind it
        # and at most REASONS_PER_STEP per step: the rest keep their reason until a later step
        # (every write collides with submissions for the database's one write lock)
        for i in range(0, len(rows), REASONS_BATCH):
            with serialized_writes(self.db.engine), self.db.session() as session:
                if self.db.is_sqlite:
                    session.execute(statement, rows[i : i + REASONS_BATCH])
                else:  # one statement for the chunk, not one per job (service/pending_reasons.py)
                    store_reasons_pg(session, rows[i : i + REASONS_BATCH])

    def _backend_job(
        self, tracked: Tracked, typed: tuple[TypedPod, ...] | None = None
    ) -> BackendJob:
        """``typed``: the pods as typed at admission in this step, else typed here."""
        return BackendJob(
            tracked.id,
            tracked.spec.get("name", str(tracked.id)),
            tracked.spec,
            typed if typed is not None else typed_pods(tracked.placement or (), self._node),
            tracked.started_at,
            tracked.attempt,
            tracked.tenant,
        )

    def _caches_of(self, node_name: str) -> NodeCacheAgent | None:
        """The dataset caches of ``node_name``'s backend (see :mod:`gpuaas.service.datasets`):
        the local backend's files, the Slurm backend's jobs on the node."""
        node = self._node(node_name) if self.engine is not None else None
        default = self.backends.default
        backend = self.backends.get(backend_of_node(node, default) if node else default)
        caches: NodeCacheAgent | None = getattr(backend, "datasets", None)
        if caches is not None or backend.name == "sim":
            return caches
        if isinstance(backend, KubernetesBackend):
            raise ReportedByBackend("Fluid reports the kubernetes backend's dataset caches")
        raise CacheError(f"the {backend.name} backend does not cache datasets on its nodes yet")

    def _fluid_nodes(self) -> dict[str, KubernetesBackend]:
        """Every fleet node run by a Kubernetes backend, with it (Fluid's datasets there)."""
        if self.engine is None or self.engine.pool is None:
            return {}
        default = self.backends.default
        names = [n.name for n in self.engine.pool.nodes if backend_of_node(n, default) == K8S]
        if not names:  # no other backend is built for this
            return {}
        backend = self.backends.get(K8S)
        return dict.fromkeys(names, backend) if isinstance(backend, KubernetesBackend) else {}

    def _alive(self, job_id: int, attempt: int) -> bool:
        """Whether ``job_id`` still holds the devices it was given at ``attempt``."""
        tracked = self.jobs.get(job_id)
        return tracked is not None and tracked.state in ACTIVE and tracked.attempt == attempt

    def _node(self, name: str) -> Node | None:
        """The node called ``name`` in the running engine (None when it left the fleet)."""
        assert self.engine is not None and self.engine.pool is not None
        pool = self.engine.pool
        try:
            return pool.nodes[pool.snapshot.index_of(name)]
        except (KeyError, IndexError):
            return None

    def _backend_name(self, tracked: Tracked) -> str | None:
        """The backend of the nodes ``tracked`` is placed on (None: they belong to several)."""
        default = self.backends.default
        names = set()
        for pod in tracked.placement or ():
            node = self._node(str(pod.get("node")))
            names.add(backend_of_node(node, default) if node is not None else default)
        if len(names) > 1:
            return None
        return names.pop() if names else default

    def _reject_spanning(self, tracked: Tracked, now: float, writes: list[Write]) -> None:
        """A job placed on nodes of several backends cannot run: Failed, quota given back."""
        default = self.backends.default
        on: dict[str, str] = {}
        for name in sorted({str(p.get("node")) for p in tracked.placement or ()}):
            node = self._node(name)
            on[name] = backend_of_node(node, default) if node is not None else default
        detail = "its pods landed on nodes of different backends: " + ", ".join(
            f"{name} ({backend})" for name, backend in on.items()
        )
        why = reason(Code.BACKEND_REJECTED, backend="+".join(sorted(set(on.values()))),
                     detail=detail)  # fmt: skip
        self._finish(tracked, JobState.FAILED, now, why, writes)

    def _stop_on_backend(self, job_id: int) -> None:
        name = self._runs_on.pop(job_id, None)
        if name is not None:
            self.driver(name).cancel(job_id)

    def _checkpoint(self, job_id: int, grace: float) -> None:
        """The idle pool's checkpoint signal for ``job_id``, with ``grace`` seconds before it
        is stopped for good, on the backend it runs on."""
        name = self._runs_on.get(job_id)
        if name is None:
            tracked = self.jobs.get(job_id)
            name = (self._backend_name(tracked) if tracked else None) or self.backends.default
        self.driver(name).checkpoint(job_id, grace)

    def _note_unavailable(self, writes: list[Write]) -> None:
        """Admitted jobs whose backend cannot be reached say so (until they start)."""
        down = {name: d.error for name, d in self._drivers.items() if d.error is not None}
        if not down:
            return
        for job_id, name in self._runs_on.items():
            tracked = self.jobs.get(job_id)
            if name not in down or tracked is None or tracked.state is not JobState.ADMITTED:
                continue
            why = reason(Code.BACKEND_UNAVAILABLE, backend=name, detail=down[name])
            if tracked.note is None or not why.same(tracked.note):
                tracked.note = why
                writes.append(Note(job_id, JobState.ADMITTED, why))

    def _backend_events(
        self, driver: BackendDriver, events: list[BackendEvent], writes: list[Write]
    ) -> None:
        """Starts, completions, rejections and losses a backend reports, as writes; completions
        free quota, a job the backend lost is queued again."""
        for event in events:
            tracked = self.jobs.get(event.job_id)
            if tracked is None or tracked.state not in ACTIVE:
                continue
            if self._runs_on.get(event.job_id, driver.name) != driver.name:
                continue  # a late report from a backend the job no longer runs on
            if event.kind is EventKind.STARTED:
                if tracked.state is JobState.ADMITTED:
                    writes.append(Start(tracked.id, event.at, driver.name))
                    tracked.state = JobState.RUNNING
                    tracked.started_at = event.at
                continue
            self._runs_on.pop(event.job_id, None)
            if event.kind is EventKind.LOST:
                lost = reason(Code.BACKEND_LOST, backend=driver.name, detail=event.reason)
                self._lose(tracked, event.at, lost, writes)
                continue
            state, why = _outcome(driver.name, event)
            at = event.at
            limit = tracked.max_run_time
            started = tracked.started_at
            if limit is not None and started is not None and event.kind is not EventKind.REJECTED:
                deadline = started + limit / driver.backend.time_scale
                if at > deadline:
                    state, at, why = JobState.FAILED, deadline, _over_time(limit)
            self._finish(tracked, state, at, why, writes)

    def _lose(self, tracked: Tracked, at: float, why: Reason, writes: list[Write]) -> None:
        """``tracked`` lost its place outside admission: give its quota and devices back and
        queue it again (it keeps its creation time), stored as a :class:`Requeue`."""
        assert self.engine is not None
        self.scheduler(self.engine).requeue(str(tracked.id), why)
        writes.append(
            self._requeue_write(tracked.id, tracked.state, tracked.cluster_queue, at, why)
        )
        tracked.requeued(at, why)

    def _finish(
        self, tracked: Tracked, state: JobState, at: float, why: Reason, writes: list[Write]
    ) -> None:
        assert self.engine is not None
        self.scheduler(self.engine).finish(str(tracked.id))
        del self.jobs[tracked.id]
        writes.append(Finish(tracked.id, tracked.state, state, at, why))

    def _hold_over_budget(
        self, scheduler: AdmissionScheduler, now: float, writes: list[Write]
    ) -> None:
        """Budgets' one rule, before every cycle: a pending job whose scope's hard budget is
        spent, or whose user's cost-rate cap it would pass, leaves the engine with that reason
        until the budget allows it again (a new period, a larger amount: it queues again with
        its place); running work goes on, unless its scope's budget says ``stopRunning``: then
        it is requeued (and held). Without budgets this is one query."""
        holds = self.budgets.holds(now)
        if self._held_by is not scheduler:  # a new engine: every pending job is queued in it
            self._held, self._held_by = {}, scheduler
        if not holds and not self._held:
            return
        for job_id, tracked in list(self.jobs.items()):
            cluster = str(tracked.spec.get("cluster") or "")
            user = tracked.workload.user
            if tracked.state in ACTIVE:
                stop = holds.stops(tracked.tenant, tracked.queue, cluster, user)
                if stop is None:
                    continue
                self._lose(tracked, now, stop, writes)  # pending again: held just below
            why = holds.why(tracked.tenant, tracked.queue, cluster, user, tracked.workload)
            if why is not None and job_id not in self._held:
                scheduler.withdraw(str(job_id))
                self._held[job_id] = tracked.reason = why
                writes.append(Note(job_id, JobState.PENDING, why))
            elif why is None and job_id in self._held:
                del self._held[job_id]
                self._queue(scheduler.engine, tracked, writes, now)
        for job_id in [j for j in self._held if j not in self.jobs]:
            del self._held[job_id]  # cancelled while held

    def _enforce_max_run_time(self, now: float, writes: list[Write]) -> None:
        """Stop and fail running jobs past their ``maxRunTime`` (in job time)."""
        for tracked in list(self.jobs.values()):
            limit = tracked.max_run_time
            if tracked.state is not JobState.RUNNING or limit is None:
                continue
            assert tracked.started_at is not None
            name = self._runs_on.get(tracked.id, self.backends.default)
            scale = self.driver(name).backend.time_scale
            if (now - tracked.started_at) * scale >= limit:
                self._stop_on_backend(tracked.id)
                self._finish(tracked, JobState.FAILED, now, _over_time(limit), writes)


def _outcome(backend: str, event: BackendEvent) -> tuple[JobState, Reason]:
    """The end state and reason of a finished, failed or rejected job."""
    if event.kind is EventKind.SUCCEEDED:
        return JobState.SUCCEEDED, reason(Code.SUCCEEDED, detail=event.reason)
    if event.kind is EventKind.REJECTED:
        detail = event.reason or "refused"
        return JobState.FAILED, reason(Code.BACKEND_REJECTED, backend=backend, detail=detail)
    if event.exit_code is not None and event.exit_code != 0:
        why = reason(Code.EXITED_WITH_ERROR, backend=backend, exit_code=event.exit_code,
                     detail=event.reason)  # fmt: skip
        return JobState.FAILED, why
    return JobState.FAILED, reason(Code.FAILED, detail=event.reason)


def _over_time(limit: float) -> Reason:
    return reason(Code.MAX_RUN_TIME_EXCEEDED, limit=limit)


def _meta(session: Session, key: str) -> str:
    return session.scalar(select(Meta.value).where(Meta.key == key)) or "0"
