"""A new leader's pending backlog, loaded in queue order over several steps.

A leader that starts (a restart, or a takeover after the last leader died) used to read every
pending job into its engine before its first admission: 5-16 s at 40,000-117,000 pending jobs,
during which nothing was admitted. What bounds capacity is small and is read whole at once: the
governance, the fleet and the admitted and running jobs (they hold the quota and the devices).
The backlog is not: a step reads the pending jobs' ids and keys (cheap: three columns), puts them
in the order every ClusterQueue queues them (higher priority first, then earlier creation, then
the name, the engine's own order: :func:`gpuaas.engine.admission.cycle._queue_order`), and then
each step queues the next jobs of that order into the engine, for about ``budget`` seconds, and
admits.

Why the order matters: the jobs loaded are always a prefix of every ClusterQueue's queue, so the
heads a cycle sees are the heads a full rebuild would see, and a job cannot be admitted ahead of
one that sorts before it in its own queue. :attr:`Backlog.boundary` is the queue key of the last
job loaded: the engine stops a pass where a queue runs out of loaded jobs while the backlog is
still loading (:attr:`gpuaas.engine.admission.AdmissionEngine.loaded_until`), since a job still
in the database might come next there.

Jobs submitted after the plan was made, and jobs cancelled meanwhile, are the reconciler's
sweep's to find once the backlog is loaded (a job whose row left Pending is skipped here).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from sqlalchemy import select
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from gpuaas.model.job_state import JobState
from gpuaas.store.tables import Job

_JOBS = Job.__table__
#: rows fetched per query (an IN list of ids)
CHUNK = 500
#: every pending job's id and queue key (a constant statement: no parameters to bind)
_PLAN = f"SELECT id, priority, created_at FROM jobs WHERE state = '{JobState.PENDING.value}'"


class Backlog:
    """The pending jobs still to load, in queue order (see the module docstring)."""

    def __init__(self, session: Session, skip: set[int] | dict[int, object]) -> None:
        # the driver's own cursor: a hundred thousand SQLAlchemy rows cost more than the query
        cursor = session.connection().connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(_PLAN)
            rows = cursor.fetchall()
        finally:
            cursor.close()
        rows.sort(key=lambda r: (-r[1], r[2], str(r[0])))
        self._keys = [(-p, c, str(i)) for i, p, c in rows if i not in skip]
        self._ids = [i for i, _, _ in rows if i not in skip]
        self._next = 0
        #: the queue key of the last job loaded (None before the first)
        self.boundary: tuple[int, float, str] | None = None

    @property
    def done(self) -> bool:
        return self._next >= len(self._ids)

    @property
    def total(self) -> int:
        return len(self._ids)

    @property
    def loaded(self) -> int:
        return self._next

    def rows(self, session: Session, budget: float) -> Iterator[Row]:
        """The next pending rows in queue order, CHUNK at a time, until ``budget`` seconds of
        this thread's CPU (this generator's and its consumer's) are spent or the backlog is
        loaded; rows that left Pending since the plan are skipped. CPU, not wall time: on a
        busy machine a step loads as much as on a quiet one (and takes longer)."""
        deadline = time.thread_time() + budget
        first = True  # at least one chunk a step, whatever the budget
        while not self.done and (first or time.thread_time() < deadline):
            first = False
            end = min(self._next + CHUNK, len(self._ids))
            chunk = self._ids[self._next : end]
            found = {
                row.id: row
                for row in session.execute(
                    select(_JOBS).where(
                        _JOBS.c.id.in_(chunk), _JOBS.c.state == JobState.PENDING.value
                    )
                )
            }
            for job_id in chunk:
                row = found.get(job_id)
                if row is not None:
                    yield row
            self._next = end
            self.boundary = self._keys[end - 1]
