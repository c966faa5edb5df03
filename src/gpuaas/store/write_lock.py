"""One SQLite writer at a time across processes, handed over by the kernel.

SQLite lets one transaction write at a time; another writer that finds the lock taken waits
in SQLite's busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100 ms between
tries. Between threads of one process :func:`gpuaas.service.jobs.serialized_writes` hands the
lock over with a ``threading.Lock``; between processes (the API server and the reconciler
child) only the busy handler did, and it starves: a writer that has waited 30 ms sleeps 15-25
ms at a time, and a process that commits and writes again at once (the reconciler storing a
step in short transactions) takes the lock back before the sleeper wakes. Measured
(``GPUAAS_SQLITE_TRACE``, docs/benchmarks.md "SQLite stalls"): the group-commit writer waited
up to 229 ms for one reconciler transaction, with every submission of the moment behind it.

So every writer that goes through ``serialized_writes`` also holds an exclusive ``flock`` on
a file beside the database (``<db>.writers``) from before its first write to its commit. A
waiter sleeps in the kernel (without the GIL) and is woken when the holder lets go, so the
lock passes from one process to the other as soon as it is free. A process that dies loses its
``flock`` with its descriptors. Writers that do not take it (a migration, the ``sqlite3``
shell) still meet SQLite's own lock and busy handler, as before: no one holding the file lock
waits for anything but SQLite's lock, so the two cannot deadlock.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy.engine import make_url


def lock_path(url: str) -> Path | None:
    """The lock file of a SQLite database file (None: in memory, or not SQLite)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    database = Path(parsed.database).expanduser()
    return database.with_name(database.name + ".writers")


@contextmanager
def across_processes(path: Path | None) -> Iterator[None]:
    """Hold the database's writer file lock; ``None``: nothing to hold. Each call opens the file
    anew, so two threads of one process exclude each other too (``flock`` belongs to an open
    file), though ``serialized_writes`` already lets one thread at a time ask."""
    if path is None:
        yield
        return
    try:  # opened each time (a few microseconds): no descriptor outlives its database
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:  # a read-only directory: SQLite's own lock still serializes writers
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # lets the lock go
