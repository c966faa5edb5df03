"""A debug trace of SQLite's write transactions, per process (``GPUAAS_SQLITE_TRACE``).

SQLite has one writer: a transaction holds the write lock from its first write to its commit,
and every other writer (in this process or another) waits for it in SQLite's busy handler,
which sleeps 1, 2, 5 ... 100 ms between tries. Finding which transactions hold the lock long,
and who waits, needs their times on both sides. With ``GPUAAS_SQLITE_TRACE`` set to a
directory, every SQLite connection of the process is made by :class:`TracingConnection`, and
each write transaction ends as one line in ``<dir>/<pid>.trace``:

``tx <first write sent> <lock got> <commit began> <commit ended> <thread> <statements> <what>
<run delay>``

(epoch seconds; "lock got" is when the first write returned, so waiting = got - sent and the
hold = commit ended - got, a checkpoint run by the commit included; "run delay": milliseconds
the thread waited for a core during that first write, from Linux's schedstat). A hold over
20 ms is followed by a ``steps`` line: each statement's start (ms after the lock was got) and
duration, so that the statements' own time and the gaps between them can be told apart.
Collections of the cyclic garbage collector are lines ``gc <start> <end> <thread>
<generation>``, and a caller may add spans of its own with :func:`span`. Off (the default) it
costs nothing: the factory is not installed and :func:`span` returns at once.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ENV = "GPUAAS_SQLITE_TRACE"

_lock = threading.RLock()  # re-entered by a collection that ends inside a write
_out: Any = None  # the open trace file of this process (None: not opened yet)
_opened: tuple[int, str] = (0, "")  # the process and directory it was opened for


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def _write(line: str) -> None:
    global _out, _opened
    directory = os.environ.get(ENV, "")
    if not directory:  # turned off since (the collector's callback stays registered)
        return
    with _lock:
        where = (os.getpid(), directory)
        if _out is None or _opened != where:
            if _out is not None and _opened[0] == where[0]:
                _out.close()
            Path(directory).mkdir(parents=True, exist_ok=True)
            _out = open(Path(directory) / f"{where[0]}.trace", "a", buffering=1, encoding="utf-8")  # noqa: SIM115
            _opened = where
            _watch_collector()
        _out.write(line)


_gc_started: dict[int, float] = {}


def _on_collection(phase: str, info: dict[str, int]) -> None:
    ident = threading.get_ident()
    if phase == "start":
        _gc_started[ident] = time.time()
        return
    began = _gc_started.pop(ident, None)
    if began is not None:
        name = threading.current_thread().name
        _write(f"gc {began:.6f} {time.time():.6f} {name} {info.get('generation')}\n")


def _watch_collector() -> None:
    if _on_collection not in gc.callbacks:
        gc.callbacks.append(_on_collection)


@contextmanager
def span(what: str) -> Iterator[None]:
    """A line ``span <start> <end> <thread> <what>`` around the block (tracing on only)."""
    if not enabled():
        yield
        return
    began = time.time()
    try:
        yield
    finally:
        name = threading.current_thread().name
        _write(f"span {began:.6f} {time.time():.6f} {name} {what}\n")


def _run_delay() -> float:
    """Seconds this thread has waited for a core (Linux schedstat), 0 where unknown."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class TracingCursor(sqlite3.Cursor):
    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:  # type: ignore[override]
        connection: TracingConnection = self.connection  # type: ignore[assignment]
        sent = time.time()
        if connection.first_write(sql):
            connection.delay = _run_delay()
        try:
            return super().execute(sql, parameters)
        finally:
            connection.note(sql, sent)

    def executemany(self, sql: str, seq: Any, /) -> sqlite3.Cursor:  # type: ignore[override]
        connection: TracingConnection = self.connection  # type: ignore[assignment]
        sent = time.time()
        if connection.first_write(sql):
            connection.delay = _run_delay()
        try:
            return super().executemany(sql, seq)
        finally:
            connection.note(sql, sent)


_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def _table(sql: str) -> str:
    words = [*sql.split(None, 3), "", "", ""]
    verb = words[0].upper()
    return f"{verb[:3]}:{words[1] if verb == 'UPDATE' else words[2]}"[:24]


class TracingConnection(sqlite3.Connection):
    """A connection that times its write transactions (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._first: tuple[float, float, str] | None = None
        self._statements = 0
        self._steps: list[tuple[float, float, str]] = []  # each write's (sent, returned, what)
        self.delay = 0.0  # the thread's run delay before the first write, then while it ran

    def first_write(self, sql: str) -> bool:
        return self._first is None and sql.lstrip()[:7].upper().startswith(_WRITES)

    def cursor(self, factory: Any = TracingCursor) -> sqlite3.Cursor:  # type: ignore[override]
        return super().cursor(factory)

    def note(self, sql: str, sent: float) -> None:
        if self._first is None:
            head = sql.lstrip()[:7].upper()
            if not head.startswith(_WRITES):
                return
            what = " ".join(sql.split()[:4])[:60].replace(" ", "_")
            self._first = (sent, time.time(), what)
            self.delay = _run_delay() - self.delay
        self._statements += 1
        self._steps.append((sent, time.time(), _table(sql)))

    def _end(self, began: float, kind: str) -> None:
        first, self._first = self._first, None
        statements, self._statements = self._statements, 0
        steps, self._steps = self._steps, []
        if first is None:
            return
        sent, got, what = first
        name = threading.current_thread().name.replace(" ", "_")
        ended = time.time()
        _write(
            f"{kind} {sent:.6f} {got:.6f} {began:.6f} {ended:.6f} {name} {statements} {what} "
            f"{1000 * self.delay:.1f}\n"
        )
        if ended - got > 0.02:  # a long hold: where its time went, statement by statement
            parts = (f"{1000 * (a - got):.1f}+{1000 * (b - a):.1f}:{w}" for a, b, w in steps)
            _write(f"steps {got:.6f} {' '.join(parts)}\n")

    def commit(self) -> None:
        began = time.time()
        try:
            super().commit()
        finally:
            self._end(began, "tx")

    def rollback(self) -> None:
        began = time.time()
        try:
            super().rollback()
        finally:
            self._end(began, "rb")
