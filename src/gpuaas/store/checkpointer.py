"""WAL checkpoints in a thread of their own, out of the submissions' commits.

In WAL mode SQLite appends every commit to the ``-wal`` file and copies it back into the
database in a *checkpoint*. By default the connection whose commit takes the WAL past 1,000
pages runs that checkpoint inside its ``commit()``: it writes the pages back and syncs the WAL
and the database file. In the API server that connection is mostly the group-commit writer
(:mod:`gpuaas.service.group_commit`), so every few thousand submissions one batch's commit
took 10-80 ms longer, with every request of the batch and of the next one waiting
(``GPUAAS_SQLITE_TRACE``, docs/benchmarks.md "SQLite stalls").

A server's database (``Database(url, Checkpoints.THREAD)``) therefore raises its connections'
``wal_autocheckpoint`` to :data:`FALLBACK_PAGES` (a bound in case this thread falls behind)
and runs ``PRAGMA wal_checkpoint(PASSIVE)`` here every :data:`EVERY` seconds (one with nothing
new to copy returns at once). A passive checkpoint takes no writer's lock: commits go on
beside it, and it never waits for a reader. The thread has its own connection, and
``sqlite3`` lets go of the GIL while SQLite works, so the event loop does not wait either.
The server's reconciler child (``Checkpoints.ELSEWHERE``) raises its connections' threshold the
same way: a checkpoint in one of its commits ran while it still held the writers' file lock
(:mod:`gpuaas.store.write_lock`), and the submissions waited for that too.
"""

from __future__ import annotations

import enum
import logging
import sqlite3
import threading

from gpuaas.store.sqlite_trace import span

log = logging.getLogger("gpuaas.store")

#: seconds between checkpoints (at 1,500 submissions/s about SQLite's own 1,000-page trigger)
EVERY = 0.5
#: the server's connections checkpoint in their own commit only past this many pages
FALLBACK_PAGES = 20_000


class Checkpoints(enum.Enum):
    """Who checkpoints a SQLite database's WAL."""

    #: the connection whose commit fills it past SQLite's 1,000 pages (SQLite's default)
    IN_COMMITS = "in commits"
    #: a :class:`Checkpointer` thread in this process
    THREAD = "thread"
    #: another process's thread (the server's, for its reconciler child)
    ELSEWHERE = "elsewhere"


class Checkpointer:
    """A daemon thread checkpointing the SQLite database file at ``path``."""

    def __init__(self, path: str, every: float = EVERY) -> None:
        self.path = path
        self.every = every
        self.checkpoints = 0  # how many ran (tests, and a look from a debugger)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="sqlite-checkpointer", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def _run(self) -> None:
        try:
            connection = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        except sqlite3.Error:
            log.exception(
                "checkpointer: cannot open %s; commits checkpoint as they fill", self.path
            )
            return
        try:
            connection.execute("PRAGMA wal_autocheckpoint=0")  # it never writes anyway
            while not self._stop.wait(self.every):
                try:
                    self.step(connection)
                except sqlite3.Error:
                    log.exception("checkpointer: checkpoint failed; tried again")
        finally:
            connection.close()

    def step(self, connection: sqlite3.Connection) -> tuple[int, int, int]:
        """One passive checkpoint: (busy, frames in the WAL, frames copied back)."""
        with span("checkpoint"):
            row = connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        busy, frames, copied = row
        self.checkpoints += 1
        return int(busy), int(frames), int(copied)
