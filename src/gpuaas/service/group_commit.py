"""Group commit for job submissions: many requests' jobs stored in one transaction.

A submission is acknowledged only once its job is committed (a 2xx means stored, and the crash
tests SIGKILL the server mid-stream to hold it to that). Committing each submission on its own
costs a commit per request: on PostgreSQL a WAL flush (fsync) that the request waits for, on
SQLite the write lock taken and handed over, a WAL append and the session's set-up, per job.

So the request path does the reading and checking (authentication, the tenant, the job's checks
against governance: :func:`gpuaas.service.jobs.prepare_job`) and hands the prepared row to one
writer thread. The writer takes everything queued (at most ``max_batch``), inserts each job
with ``INSERT ... ON CONFLICT (tenant, user, idempotency key) DO NOTHING RETURNING id`` and the
jobs' first events in one ``executemany``, commits once, and only then answers every request
in the batch. No request waits on a timer: while one batch commits the next one gathers, so the
batch grows with the load and a lone request is written at once. The requests an event loop
prepares in one iteration reach the writer as one item (handed over by a ``call_soon`` at the
end of that iteration), one thread wake-up for all of them; the jobs of a batch that carry an
idempotency key go in one multi-row ``INSERT ... RETURNING``. On PostgreSQL those jobs and their
first events are one prepared statement of fixed text, the rows passed as one JSON parameter
(:func:`_store_keyed`, :mod:`gpuaas.store.pg_rows`).

A created job's audit entry goes in the same transaction (:mod:`gpuaas.service.audit`: the
request's draft, completed here with the job's id and the digest of its answer, which the
writer therefore serializes before the commit and hands back): one write transaction per batch
instead of the audit thread's second one beside it, and an acknowledged job always has its
entry. The entries are one ``executemany`` on SQLite and one statement of fixed text on
PostgreSQL (:mod:`gpuaas.store.pg_rows`), like the events.

A row the conflict clause skipped is a repeated idempotency key: after the commit the writer
reads the job that key made (answered 200, as before). Anything else the batch's transaction
refuses (a tenant or user deleted meanwhile: a foreign key) rolls the batch back, and each of
its jobs is then written in a transaction of its own, so one bad row fails its own request
only. A request whose client went away still has its job written (it was acknowledged to no
one, as when the client disconnects after the commit).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from sqlalchemy import Insert, insert
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from gpuaas.engine.reasons import Code
from gpuaas.model.job_state import JobState
from gpuaas.service.audit import AuditEntry, AuditLog, created, insert_entries
from gpuaas.service.errors import not_found
from gpuaas.service.jobs import find_by_key, inserted_job, serialized_writes
from gpuaas.service.replica_sets import create_set
from gpuaas.store.db import Database
from gpuaas.store.pg_rows import driver_cursor, json_rows, quoted, rows_param, stored
from gpuaas.store.tables import Job, JobEvent

log = logging.getLogger("gpuaas.service")

_JOBS = Job.__table__
_EVENTS_TABLE = JobEvent.__table__
_INSERT_EVENT = insert(JobEvent.__table__)
#: the most jobs one transaction holds: large enough that a commit is shared by every request
#: of a burst, small enough that a batch's transaction stays short for the reconciler
MAX_BATCH = 256


def _insert_job(dialect: str) -> Insert:
    """The job insert that skips a repeated idempotency key instead of failing the batch."""
    make = postgresql.insert if dialect == "postgresql" else sqlite.insert
    return (
        make(_JOBS)
        .on_conflict_do_nothing(index_elements=["tenant_id", "user_id", "idempotency_key"])
        .returning(_JOBS.c.id)
    )


def _insert_jobs(dialect: str) -> Insert:
    """:func:`_insert_job` for many rows at once, returning what matches a row to its request."""
    make = postgresql.insert if dialect == "postgresql" else sqlite.insert
    c = _JOBS.c
    return (
        make(_JOBS)
        .on_conflict_do_nothing(index_elements=["tenant_id", "user_id", "idempotency_key"])
        .returning(c.id, c.tenant_id, c.user_id, c.idempotency_key)
    )


class Stored(NamedTuple):
    """What :meth:`SubmissionWriter.submit` answers."""

    job: Job
    created: bool
    #: the answer (``render(job)``) when the writer serialized it for the audit entry
    answer: bytes | None = None
    #: whether the job's audit entry was stored with it
    audited: bool = False


@dataclass(slots=True)
class _Pending:
    """One request's prepared job and where to send its answer."""

    values: dict[str, Any]
    tenant_name: str
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Stored]
    render: Callable[[Job], bytes] | None = None
    draft: AuditEntry | None = None
    job_id: int | None = field(default=None)
    #: set in the transaction for a created job with a draft: the job, its answer, its entry
    job: Job | None = None
    answer: bytes | None = None
    entry: AuditEntry | None = None

    def reset(self) -> None:
        self.job_id = self.job = self.answer = self.entry = None


class SubmissionWriter:
    """The writer thread of one database. ``start()`` with the server, ``stop()`` at shutdown
    (which writes what is queued first)."""

    def __init__(
        self, db: Database, max_batch: int = MAX_BATCH, audit: AuditLog | None = None
    ) -> None:
        self.db = db
        #: the audit log that ships the entries stored here to its sinks
        self.audit = audit
        self.max_batch = max_batch
        self._insert = _insert_job(db.engine.dialect.name)
        self._insert_many = _insert_jobs(db.engine.dialect.name)
        self._queue: queue.SimpleQueue[list[_Pending] | None] = queue.SimpleQueue()
        #: per event loop, the requests handed over since the loop last ran its callbacks
        self._gathering: dict[asyncio.AbstractEventLoop, list[_Pending]] = {}
        self._thread: threading.Thread | None = None
        #: batches written and jobs in them (``/metrics``-free counters for tests and benches)
        self.batches = 0
        self.jobs = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="submission-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=30)
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    async def submit(
        self,
        values: dict[str, Any],
        tenant_name: str,
        render: Callable[[Job], bytes] | None = None,
        draft: AuditEntry | None = None,
    ) -> Stored:
        """Store a prepared job (:func:`~gpuaas.service.jobs.prepare_job`); returns (job,
        created, ...) once it is committed, like :func:`~gpuaas.service.jobs.submit_job`.
        With ``render`` (the job's answer) and ``draft`` (:func:`gpuaas.service.audit
        .create_draft`), a created job's audit entry is stored in the same transaction."""
        loop = asyncio.get_running_loop()
        pending = _Pending(values, tenant_name, loop, loop.create_future(), render, draft)
        gathering = self._gathering.get(loop)
        if gathering is None:  # the first of this loop iteration: hand over once it ends
            gathering = self._gathering[loop] = []
            loop.call_soon(self._hand_over, loop)
        gathering.append(pending)
        return await asyncio.shield(pending.future)

    def _hand_over(self, loop: asyncio.AbstractEventLoop) -> None:
        """Queue what the loop gathered as one item: one wake-up of the writer thread (a
        thread switch, measured at several percent of the server's CPU when done per request)
        for every request the loop prepared in one iteration, not one each."""
        gathered = self._gathering.pop(loop, None)
        if gathered:
            self._queue.put(gathered)

    # --- the writer thread ------------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._queue.get()
            if first is None:
                break
            waiting = list(first)
            while len(waiting) < self.max_batch:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stopping = True
                    break
                waiting.extend(more)
            for start in range(0, len(waiting), self.max_batch):
                batch = waiting[start : start + self.max_batch]
                try:
                    self._write(batch)
                except Exception as exc:  # never leave a request waiting
                    log.exception("submissions: writing a batch of %d failed", len(batch))
                    for item in batch:
                        _answer(item, exc=exc)

    def _write(self, batch: list[_Pending]) -> None:
        try:
            self._store(batch)
        except Exception:  # a row the batch cannot hold (foreign key): each in its own
            if len(batch) == 1:
                raise
            for item in batch:
                item.reset()
                try:
                    self._store([item])
                except Exception as exc:
                    _answer(item, exc=exc)
                else:
                    self._answer_stored([item])
            return
        self._answer_stored(batch)

    def _store(self, batch: Sequence[_Pending]) -> None:
        """Insert the batch's jobs and their first events; commit once."""
        beside: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if self.audit is not None and any(item.draft for item in batch):
            beside = self.audit.beside()  # one writer of the audit table at a time
        with beside, serialized_writes(self.db.engine), self.db.sessions() as session:
            try:
                rest: Sequence[_Pending] = batch
                if not self.db.is_sqlite:  # keyed jobs and their events: one statement
                    keyed = [item for item in batch if item.values["idempotency_key"] is not None]
                    if keyed:
                        _store_keyed(session, keyed)
                        rest = [item for item in batch if item.values["idempotency_key"] is None]
                self._insert_rows(session, rest)
                events = [_first_event(item) for item in rest if item.job_id is not None]
                for item in batch:
                    if item.job_id is not None and "autoscale" in item.values["spec"]:
                        create_set(session, item.job_id)  # its replica set
                if events:
                    session.execute(_INSERT_EVENT, events)
                entries = _audit_entries(batch)
                if entries:
                    insert_entries(session, entries, postgres=not self.db.is_sqlite)
                session.commit()
            except BaseException:
                session.rollback()
                raise
        self.batches += 1
        self.jobs += len(batch)
        if entries and self.audit is not None:
            self.audit.stored_elsewhere(entries)

    def _insert_rows(self, session: Session, batch: Sequence[_Pending]) -> None:
        """Set each item's ``job_id`` (None: its key had already made a job).

        The jobs with an idempotency key go in one multi-row ``INSERT ... RETURNING`` (one
        statement per batch instead of one per job); the returned rows are matched to the
        requests by (tenant, user, key), the first request of a key repeated within the batch
        taking the row (rows are inserted in the order given, so it is that request's). A job
        without a key has nothing to match by and is inserted alone.
        """
        keyed = [item for item in batch if item.values["idempotency_key"] is not None]
        for item in batch:
            if item.values["idempotency_key"] is None:
                item.job_id = session.execute(self._insert, item.values).scalar()
        if len(keyed) == 1:
            keyed[0].job_id = session.execute(self._insert, keyed[0].values).scalar()
        elif keyed:
            made = {
                (tenant, user, key): job_id
                for job_id, tenant, user, key in session.execute(
                    self._insert_many, [item.values for item in keyed]
                )
            }
            for item in keyed:
                v = item.values
                item.job_id = made.pop((v["tenant_id"], v["user_id"], v["idempotency_key"]), None)

    def _answer_stored(self, batch: Sequence[_Pending]) -> None:
        repeats = [item for item in batch if item.job_id is None]
        _answer_many([(i, _stored(i)) for i in batch if i.job_id])
        if not repeats:
            return
        with self.db.sessions() as session:
            for item in repeats:
                v = item.values
                existing = find_by_key(session, v["tenant_id"], v["user_id"], v["idempotency_key"])
                if existing is None:  # the key's job is gone (its tenant or user deleted)
                    _answer(item, exc=not_found(f"tenant {item.tenant_name}"))
                else:
                    session.expunge(existing)
                    _answer(item, Stored(existing, False))


def _audit_entries(batch: Sequence[_Pending]) -> list[AuditEntry]:
    """The audit entries of the batch's created jobs that carry a draft, each item's job and
    answer kept for its request (see the module docstring)."""
    entries = []
    for item in batch:
        if item.job_id is not None and item.draft is not None and item.render is not None:
            item.job = inserted_job(item.job_id, item.values)
            item.answer = item.render(item.job)
            item.entry = created(item.draft, item.job_id, item.answer)
            entries.append(item.entry)
    return entries


def _stored(item: _Pending) -> Stored:
    if item.entry is not None:
        return Stored(item.job, True, item.answer, True)
    return Stored(inserted_job(item.job_id, item.values), True)


def _first_event(item: _Pending) -> dict[str, Any]:
    return {
        "job_id": item.job_id,
        "at": item.values["created_at"],
        "from_state": None,
        "to_state": JobState.PENDING.value,
        "reason": "submitted",
        "reason_code": Code.SUBMITTED.value,
    }


# --- PostgreSQL: a batch's keyed jobs and their events in one prepared statement --------------
#
# ``WITH j AS (INSERT INTO jobs ... SELECT ... FROM json_to_recordset(the batch's rows as one
# JSON parameter) ORDER BY the request's place ON CONFLICT DO NOTHING RETURNING ...), e AS
# (INSERT INTO job_events ... SELECT FROM j) SELECT ... FROM j`` (store/pg_rows.py): one round
# trip and one statement (its text fixed, so prepared after a few uses) where SQLAlchemy sent a
# multi-row VALUES of a new text per batch size and then one INSERT per event. The rows go in the
# requests' order, so of a key repeated in the batch the first request's row is the one stored
# (as with the multi-row VALUES); the events are written for the rows inserted only (a repeated
# key made no job and no event).

_EVENT_CONSTANTS = (None, JobState.PENDING.value, "submitted", Code.SUBMITTED.value)
#: the statement per set of columns (prepare_job's row has one, fixed)
_KEYED_SQL: dict[tuple[str, ...], str] = {}


def _keyed_sql(columns: tuple[str, ...]) -> str:
    sql = _KEYED_SQL.get(columns)
    if sql is None:
        names = ", ".join(quoted(name) for name in columns)
        events = _EVENTS_TABLE.name
        sql = _KEYED_SQL[columns] = (
            f"WITH j AS (INSERT INTO {_JOBS.name} ({names})"
            f" SELECT {stored(_JOBS, columns)} FROM {json_rows(_JOBS, columns)}"
            " ORDER BY r.ordinality"
            " ON CONFLICT (tenant_id, user_id, idempotency_key) DO NOTHING"
            " RETURNING id, tenant_id, user_id, idempotency_key, created_at),"
            f" e AS (INSERT INTO {events} (job_id, at, from_state, to_state, reason, reason_code)"
            " SELECT j.id, j.created_at, %s::TEXT, %s::TEXT, %s::TEXT, %s::TEXT FROM j)"
            " SELECT id, tenant_id, user_id, idempotency_key FROM j"
        )
    return sql


def _store_keyed(session: Session, keyed: Sequence[_Pending]) -> None:
    """Insert ``keyed`` (every one with an idempotency key) and the first event of each job
    made; set each item's ``job_id`` (None: its key had already made a job)."""
    columns = tuple(keyed[0].values)
    cursor = driver_cursor(session)
    try:
        cursor.execute(
            _keyed_sql(columns), [rows_param(item.values for item in keyed), *_EVENT_CONSTANTS]
        )
        made = {(tenant, user, key): job_id for job_id, tenant, user, key in cursor.fetchall()}
    finally:
        cursor.close()
    for item in keyed:
        v = item.values
        item.job_id = made.pop((v["tenant_id"], v["user_id"], v["idempotency_key"]), None)


def _answer(item: _Pending, result: Stored | None = None, exc: BaseException | None = None) -> None:
    def settle() -> None:
        if item.future.done():
            return
        if exc is not None:
            item.future.set_exception(exc)
        else:
            item.future.set_result(result)  # type: ignore[arg-type]

    with contextlib.suppress(RuntimeError):  # the request's loop is closed: nobody to answer
        item.loop.call_soon_threadsafe(settle)


def _answer_many(answers: Sequence[tuple[_Pending, Stored]]) -> None:
    """Settle a batch's futures with one wake-up per event loop, not one per request."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[_Pending, Stored]]] = {}
    for item, result in answers:
        by_loop.setdefault(item.loop, []).append((item, result))
    for loop, settled in by_loop.items():

        def settle(settled: list[tuple[_Pending, Stored]] = settled) -> None:
            for item, result in settled:
                if not item.future.done():
                    item.future.set_result(result)

        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to answer
            loop.call_soon_threadsafe(settle)
