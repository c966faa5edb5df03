"""A reconcile step's writes in short transactions on SQLite.

SQLite has one writer. A step that stores its decisions in one transaction holds the write
lock across all of them, and between its statements runs Python: each admission's placement
record, its typed pods, its reason, its usage record. Measured (``GPUAAS_SQLITE_TRACE``,
docs/benchmarks.md "SQLite stalls"): 32 admissions held the lock 42-158 ms, 32 starts 63-229
ms, the statements themselves well under a millisecond of it; the rest was Python, a
collection, or the child (at niceness +5) waiting for a core while it held the lock. The
group-commit writer, and every submission of the moment, waited behind it.

:class:`WriteChunks` gives the step a session and, at each :meth:`boundary` the step marks
between two independent writes, commits once the transaction has run :data:`CHUNK_SECONDS`
and begins another: the lock passes to a waiting writer at once (the file lock of
:mod:`gpuaas.store.write_lock` wakes it). Each write is one job's conditional transition, so a
step stored in several commits is what several shorter steps would have stored, and if a
later chunk fails the engine is rebuilt from what was committed (as after a failed step):
admitted jobs are launched by the rebuild, stray ones stopped (``BackendDriver.adopt``). A
step that evicts stores its evictions and admissions in one chunk, as before: a preemptor's
admission and its victims' evictions stand or fall together. The cyclic collector is off
while a chunk holds the lock (a full one took 0.1-0.3 s in the child at 20,000 pending).

On PostgreSQL (row locks, and a commit is a WAL flush) the step keeps one transaction.
"""

from __future__ import annotations

import gc
import math
import time
from contextlib import ExitStack
from types import TracebackType

from sqlalchemy.orm import Session

from gpuaas.service.jobs import serialized_writes
from gpuaas.store.db import Database

#: how long one of a step's transactions may run before a boundary commits it (SQLite)
CHUNK_SECONDS = 0.005


class WriteChunks:
    """``with WriteChunks(db) as chunks:`` write through ``chunks.session``; call
    :meth:`boundary` where the transaction may end. Commits at the end, rolls back the open
    chunk on an error (earlier chunks stay committed)."""

    def __init__(self, db: Database, budget: float | None = None) -> None:
        self.db = db
        self.budget = (CHUNK_SECONDS if budget is None else budget) if db.is_sqlite else math.inf
        self.commits = 0
        self._stack: ExitStack | None = None
        self._session: Session | None = None
        self._began = 0.0
        self._collecting = False

    @property
    def session(self) -> Session:
        if self._session is None:
            self._open()
        assert self._session is not None
        return self._session

    def _open(self) -> None:
        stack = ExitStack()
        self._collecting = gc.isenabled()
        gc.disable()  # no collection while this holds the write lock
        try:
            stack.enter_context(serialized_writes(self.db.engine))
            self._session = stack.enter_context(self.db.sessions())
        except BaseException:
            stack.close()
            self._restore_gc()
            raise
        self._stack = stack
        self._began = time.monotonic()

    def _restore_gc(self) -> None:
        if self._collecting:
            gc.enable()

    def _close(self, commit: bool) -> None:
        session, stack = self._session, self._stack
        self._session = self._stack = None
        if session is None or stack is None:
            return
        try:
            if commit:
                session.commit()
                self.commits += 1
            else:
                session.rollback()
        finally:
            stack.close()
            self._restore_gc()

    def boundary(self) -> None:
        """The writes so far may be committed apart from the ones after: commit if this
        transaction has run its budget (the next write begins another)."""
        if self._session is not None and time.monotonic() - self._began >= self.budget:
            self._close(commit=True)

    def __enter__(self) -> WriteChunks:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self._close(commit=kind is None)
