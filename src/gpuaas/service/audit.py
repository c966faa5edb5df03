"""The audit log: who changed what, when, with which token, and how it ended.

Every request that may write (``POST``, ``PUT``, ``PATCH``, ``DELETE`` under ``/v1/``) is an
entry, whatever its outcome: the change made, a refusal (401, 403, 409, 422, 429) and an error
alike, so a token guesser or a user probing other tenants leaves a trace too. An entry holds:

- ``at``, the caller (user and token id; empty for an unauthenticated attempt), the tenant the
  path names, the method, the route template (``/v1/tenants/{tenant}/jobs``) and the object
  (the request path; for a create, the path of the object created, from the answer's ``name``
  or ``id``);
- ``status`` and ``outcome`` (``ok``, ``refused`` for a 4xx, ``error`` for a 5xx);
- three SHA-256 digests: of the request body, of the object after (the answer's body, which for
  a write is the object as stored; none after a delete), and of the object before (the
  ``after`` of the last successful entry for the same object, so an object's entries chain and
  a change made around the API shows up as a break in the chain).

Entries are appended by the request path to a queue and written by one thread in batches
(every ``flush_interval`` or ``batch`` entries, one transaction each): the audit costs a write
request no transaction of its own. A crash can lose the entries of the last interval (0.2 s by
default), never a change itself. The one exception is the API's hot path, a created job
(``POST /v1/tenants/{tenant}/jobs`` answered 201): its entry is written by the group-commit
writer in the very transaction that stores the job (:mod:`gpuaas.service.group_commit`), so an
acknowledged job always has its entry and a submission costs the database one write
transaction, not two (the audit thread's flushes, holding the GIL and SQLite's write lock
beside the writer's batches, were where the slowest submissions waited). Such an entry is
built on the request's path as a draft (:func:`create_draft`: the caller, the route, the
request's digest) and completed by the writer once the job has its id (:func:`created`); a new
object has no entry before it, so its ``before`` is none and nothing is looked up. Entries are
therefore stored in the order their transactions commit: ``id`` orders each object's entries
(a job's later changes are requested after its creation was acknowledged), ``at`` says when.
Nothing updates or deletes a row of ``audit_log``: the table is append-only by construction (no
route, no code path writes it but :meth:`AuditLog.flush` and the submissions' writer).

When configured, each batch is also shipped, after it is stored, as JSON lines to an HTTP sink
(``GPUAAS_AUDIT_HTTP``: POSTed, ``application/x-ndjson``) and/or to syslog
(``GPUAAS_AUDIT_SYSLOG``: ``host:port`` over UDP, or a socket path such as ``/dev/log``). A sink
that fails is counted and logged; it never holds the API or the table.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import logging.handlers
import queue
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpuaas.service.auth import hash_token
from gpuaas.store.db import Database
from gpuaas.store.pg_rows import driver_cursor, json_rows, quoted, rows_param, stored
from gpuaas.store.tables import NAME, AuditRow, Token, User

log = logging.getLogger("gpuaas.audit")

WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
#: the largest body digested in full; a larger one (refused by the body limit anyway) is digested
#: up to here
_DIGEST_LIMIT = 4 << 20


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


#: where a request's :class:`BodyDigest` is kept in its ASGI scope (by :class:`AuditMiddleware`
#: and the submission lane), for a route whose entry is written with its change
BODY_DIGEST = "gpuaas.audit.body"
#: set in the scope once the request's entry is stored with its change: the middleware and the
#: lane then record nothing more
WRITTEN = "gpuaas.audit.written"


class BodyDigest:
    """SHA-256 of a request body as it is read, up to :data:`_DIGEST_LIMIT` bytes (the
    audit middleware's and the submission lane's one way of digesting a body)."""

    __slots__ = ("_hash", "_seen")

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._seen = 0

    def update(self, chunk: bytes) -> None:
        if self._seen < _DIGEST_LIMIT:
            self._hash.update(chunk[: _DIGEST_LIMIT - self._seen])
        self._seen += len(chunk)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


@dataclass(frozen=True, slots=True)
class AuditEntry:
    at: float
    user: str
    token_id: int | None
    tenant: str | None
    method: str
    route: str
    object: str
    status: int
    outcome: str
    request_digest: str
    after_digest: str | None
    before_digest: str | None = None

    def line(self) -> str:
        return json.dumps(self.row(), separators=(",", ":"), sort_keys=True)

    def row(self) -> dict[str, Any]:
        """The fields as a flat dict (``dataclasses.asdict`` deep-copies: it cost the writer
        more than the insert)."""
        return {name: getattr(self, name) for name in _FIELDS}


_FIELDS = tuple(f.name for f in fields(AuditEntry))


def outcome_of(status: int) -> str:
    return "ok" if status < 400 else "refused" if status < 500 else "error"


def entry_of(row: AuditRow) -> AuditEntry:
    return AuditEntry(
        at=row.at, user=row.user, token_id=row.token_id, tenant=row.tenant, method=row.method,
        route=row.route, object=row.object, status=row.status, outcome=row.outcome,
        request_digest=row.request_digest, after_digest=row.after_digest,
        before_digest=row.before_digest,
    )  # fmt: skip


class AuditLog:
    """The queue, the writer thread and the sinks. ``start(db)`` once the database is up,
    ``stop()`` at shutdown (which writes what is queued)."""

    def __init__(
        self,
        *,
        http_sink: str | None = None,
        syslog_sink: str | None = None,
        flush_interval: float = 0.2,
        batch: int = 500,
    ) -> None:
        self.flush_interval = flush_interval
        self.batch = batch
        #: entries with the hash of their bearer token where authentication did not say who
        #: (a body refused before the route authenticated): the writer looks the token up
        self._queue: queue.SimpleQueue[tuple[AuditEntry, str | None]] = queue.SimpleQueue()
        self._db: Database | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        #: one writer of the table at a time (this log's flush, or the submissions' writer)
        self._lock = threading.Lock()
        self._ship_lock = threading.Lock()  # the sinks get one batch at a time, in order
        self.http_sink = http_sink
        self._syslog: logging.Logger | None = None
        if syslog_sink:
            self._syslog = logging.getLogger(f"gpuaas.audit.syslog.{id(self)}")
            self._syslog.propagate = False
            self._syslog.setLevel(logging.INFO)
            host, _, port = syslog_sink.rpartition(":")
            address: Any = (host, int(port)) if host and port.isdigit() else syslog_sink
            self._syslog.addHandler(logging.handlers.SysLogHandler(address=address))
        self.sink_failures = 0
        self.dropped = 0
        #: entries stored by another writer (the submissions'), for the sinks only
        self._to_ship: queue.SimpleQueue[list[AuditEntry]] = queue.SimpleQueue()

    @property
    def ships(self) -> bool:
        """Whether a sink is configured."""
        return self._syslog is not None or bool(self.http_sink)

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self, db: Database) -> None:
        self._db = db
        self._stopping.clear()
        self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.flush()

    def _run(self) -> None:
        while not self._stopping.wait(self.flush_interval):
            try:
                self.flush()
            except Exception:  # the database is away: keep the entries, try again
                log.exception("audit: writing entries failed; will retry")

    # --- writing --------------------------------------------------------------------------------
    def record(self, entry: AuditEntry, token_hash: str | None = None) -> None:
        self._queue.put((entry, token_hash))

    def record_answer(
        self,
        scope: Scope,
        status: int,
        request_digest: str,
        answer_digest: str,
        answer: list[bytes],
        made: str | int | None = None,
    ) -> None:
        """The entry of one answered request (:class:`AuditMiddleware`'s, and the submission
        lane's, :mod:`gpuaas.service.submission_lane`); ``made``: the key of the object a 201
        created, when the caller knows it (else it is read from the answer)."""
        entry = _entry(scope, status, request_digest, answer_digest, answer, made)
        self.record(entry, None if entry.user else _bearer_hash(scope))

    def stored_elsewhere(self, entries: list[AuditEntry]) -> None:
        """Entries another writer stored in its own transaction (see the module docstring):
        shipped to the sinks by this log's thread at its next flush, never on the caller's."""
        if entries and self.ships:
            self._to_ship.put(entries)

    @contextlib.contextmanager
    def beside(self) -> Iterator[None]:
        """Held by another writer (the submissions') around a transaction that appends
        entries: one transaction writes the table at a time, so ids follow the commits (a
        reader paging by ``id`` misses nothing), and what is queued is written first, so they
        follow the requests too. Take it before the transaction's first write: this log's
        own flush takes it before its database's write lock as well."""
        with self._lock:
            if self._db is not None and not self._queue.empty():
                try:
                    self._write_queued()
                except Exception:  # the database is away: this log's thread tries again
                    log.exception("audit: writing entries failed; will retry")
            yield

    def flush(self) -> int:
        """Write what is queued (in batches of ``batch``) and ship what was stored to the
        sinks (outside the lock: a slow sink holds no writer); the number written."""
        if self._db is None:
            return 0
        try:
            with self._lock:
                return self._write_queued()
        finally:
            with self._ship_lock:
                while True:
                    try:
                        self._ship(self._to_ship.get_nowait())
                    except queue.Empty:
                        break

    def _write_queued(self) -> int:
        """Store what is queued and queue it for the sinks; the caller holds the lock."""
        written = 0
        while True:
            pending: list[tuple[AuditEntry, str | None]] = []
            while len(pending) < self.batch:
                try:
                    pending.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if not pending:
                return written
            try:
                stored = self._store(pending)
            except OperationalError:  # the database is away: all back, in order
                for item in pending:
                    self._queue.put(item)
                raise
            except Exception:  # one entry the database refuses must not block the rest
                stored = []
                for item in pending:
                    try:
                        stored += self._store([item])
                    except OperationalError:
                        self._queue.put(item)
                    except Exception:
                        self.dropped += 1
                        log.exception("audit: an entry the database refuses: %s", item[0])
            written += len(stored)
            self.stored_elsewhere(stored)

    def _store(self, pending: Sequence[tuple[AuditEntry, str | None]]) -> list[AuditEntry]:
        assert self._db is not None
        postgres = not self._db.is_sqlite
        with self._db.session() as session:
            objects = {e.object for e, _ in pending}
            last = _last_after_pg(session, objects) if postgres else _last_after(session, objects)
            holders = _holders(session, {h for _, h in pending if h})
            stored = []
            for entry, token_hash in pending:
                who = holders.get(token_hash or "", {})
                done = replace(entry, **who, before_digest=last.get(entry.object))
                stored.append(done)
                if entry.outcome == "ok":
                    last[entry.object] = entry.after_digest
            insert_entries(session, stored, postgres=postgres)
        return stored

    def _ship(self, entries: Iterable[AuditEntry]) -> None:
        if not self.ships:
            return  # no sink: nothing to render
        lines = [e.line() for e in entries]
        if self._syslog is not None:
            for line in lines:
                try:
                    self._syslog.info("gpuaas-audit %s", line)
                except Exception:
                    self.sink_failures += 1
        if self.http_sink:
            try:
                httpx.post(
                    self.http_sink,
                    content="\n".join(lines) + "\n",
                    headers={"content-type": "application/x-ndjson"},
                    timeout=5.0,
                ).raise_for_status()
            except httpx.HTTPError as exc:
                self.sink_failures += 1
                log.warning("audit: the HTTP sink %s failed: %s", self.http_sink, exc)


def insert_entries(session: Session, entries: Sequence[AuditEntry], *, postgres: bool) -> None:
    """Append ``entries`` in the session's transaction: on PostgreSQL one statement for them
    all (not one per entry), on SQLite one ``executemany`` of a fixed text on the driver's
    cursor (SQLAlchemy's ORM bulk insert cost the group-commit writer more than its jobs)."""
    if postgres:
        _insert_pg(session, entries)
        return
    cursor = driver_cursor(session)
    try:
        cursor.executemany(_INSERT_SQLITE, [tuple(e.row().values()) for e in entries])
    finally:
        cursor.close()


def _holders(session: Session, hashes: set[str]) -> dict[str, dict[str, Any]]:
    """Token hash -> its user and id, for entries authentication did not name."""
    if not hashes:
        return {}
    rows = session.execute(
        select(Token.token_hash, Token.id, User.name)
        .join(User, User.id == Token.user_id)
        .where(Token.token_hash.in_(hashes))
    )
    return {h: {"user": name, "token_id": tid} for h, tid, name in rows}


def _last_after(session: Session, objects: set[str]) -> dict[str, str | None]:
    """The ``after`` digest of each object's last successful entry."""
    out: dict[str, str | None] = {}
    if not objects:
        return out
    rows = session.execute(
        select(AuditRow.object, AuditRow.after_digest)
        .where(AuditRow.object.in_(objects), AuditRow.outcome == "ok")
        .order_by(AuditRow.id)
    )
    for obj, after in rows:
        out[obj] = after
    return out


# --- PostgreSQL: a batch's look-up and insert as one statement each, of fixed text -----------
# (store/pg_rows.py: SQLAlchemy sent one INSERT per entry and an ``IN`` list of a new length
# per batch, neither ever prepared)

_AUDIT = AuditRow.__table__
_INSERT_PG = (
    f"INSERT INTO {_AUDIT.name} ({', '.join(quoted(c) for c in _FIELDS)})"
    f" SELECT {stored(_AUDIT, _FIELDS)} FROM {json_rows(_AUDIT, _FIELDS)} ORDER BY r.ordinality"
)
_INSERT_SQLITE = (
    f"INSERT INTO {_AUDIT.name} ({', '.join(quoted(c) for c in _FIELDS)})"
    f" VALUES ({', '.join('?' for _ in _FIELDS)})"
)
_LAST_AFTER_PG = (
    f"SELECT DISTINCT ON (object) object, after_digest FROM {_AUDIT.name}"
    " WHERE object = ANY(%s::VARCHAR[]) AND outcome = 'ok' ORDER BY object, id DESC"
)


def _last_after_pg(session: Session, objects: set[str]) -> dict[str, str | None]:
    """:func:`_last_after` in one prepared statement."""
    if not objects:
        return {}
    cursor = driver_cursor(session)
    try:
        cursor.execute(_LAST_AFTER_PG, [list(objects)])
        return dict(cursor.fetchall())
    finally:
        cursor.close()


def _insert_pg(session: Session, entries: Sequence[AuditEntry]) -> None:
    cursor = driver_cursor(session)
    try:
        cursor.execute(_INSERT_PG, [rows_param(e.row() for e in entries)])
    finally:
        cursor.close()


class AuditMiddleware:
    """Records every write request under ``/v1/`` (see the module docstring). It reads the
    caller from ``request.state.principal``, which authentication sets."""

    def __init__(self, app: ASGIApp, audit: AuditLog) -> None:
        self.app = app
        self.audit = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in WRITES
            or not scope["path"].startswith("/v1/")
        ):
            await self.app(scope, receive, send)
            return
        request_hash = scope[BODY_DIGEST] = BodyDigest()
        answer_hash = hashlib.sha256()
        answer: list[bytes] = []
        status = 500

        async def receiving() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                request_hash.update(message.get("body", b""))
            return message

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                answer_hash.update(body)
                if sum(map(len, answer)) < 65536:
                    answer.append(body)
            await send(message)

        try:
            await self.app(scope, receiving, sending)
        finally:
            if not scope.pop(WRITTEN, False):
                self.audit.record_answer(
                    scope, status, request_hash.hexdigest(), answer_hash.hexdigest(), answer
                )


def _made_key(answer: list[bytes]) -> Any:
    """The key of the object a create's answer shows: its ``id`` when a number (jobs, tokens),
    else its ``name``."""
    if not answer:
        return None
    try:
        made = json.loads(b"".join(answer))
    except ValueError:
        return None
    if not isinstance(made, dict):
        return None
    return made.get("id") if isinstance(made.get("id"), int) else made.get("name")


def _text(value: str, limit: int) -> str:
    """As stored: a NUL (PostgreSQL's text refuses it; a path may decode to one) written as
    ``\\x00``, and at most the column's length."""
    return value.replace("\x00", "\\x00")[:limit]


def _bearer_hash(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return hash_token(token.strip())
    return None


def _entry(
    scope: Scope,
    status: int,
    request_digest: str,
    answer_digest: str,
    answer: list[bytes],
    made: str | int | None = None,
) -> AuditEntry:
    method = scope["method"]
    path = scope["path"]
    route = getattr(scope.get("route"), "path", None) or path
    principal = (scope.get("state") or {}).get("principal")
    params = scope.get("path_params") or {}
    tenant = params.get("tenant")
    obj = path.rstrip("/")
    if method == "POST" and status == 201:  # a create: the object made
        key = made if made is not None else _made_key(answer)
        if key is not None:
            obj = f"{obj}/{key}"
    outcome = outcome_of(status)
    after = None if method == "DELETE" or outcome != "ok" else answer_digest
    return AuditEntry(
        at=time.time(),
        user=getattr(principal, "user", "") or "",
        token_id=getattr(principal, "token_id", None) or None,
        tenant=_text(str(tenant), NAME) if tenant is not None else None,
        method=method,
        route=_text(route, 300),
        object=_text(obj, 1000),
        status=status,
        outcome=outcome,
        request_digest=request_digest,
        after_digest=after,
    )


def create_draft(scope: Scope) -> AuditEntry | None:
    """The entry of a create the request's route stores itself (see the module docstring),
    without the object's key and the answer's digest: None when no audit digests this request
    (an app without the audit middleware). Call it once the request is authenticated."""
    body = scope.get(BODY_DIGEST)
    if body is None:
        return None
    return _entry(scope, 201, body.hexdigest(), "", [])


def created(draft: AuditEntry, key: int | str, answer: bytes) -> AuditEntry:
    """``draft`` (:func:`create_draft`) completed: the object made and its answer's digest; a
    new object, so nothing before it."""
    return replace(
        draft,
        at=time.time(),
        object=_text(f"{draft.object}/{key}", 1000),
        after_digest=digest(answer),
    )
