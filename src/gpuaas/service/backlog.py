"""A new leader's pending backlog, loaded in queue order over several steps.

A leader that starts (a restart, or a takeover after the last leader died) used to read every
pending job into its engine before its first admission: 5-16 s at 40,000-117,000 pending jobs,
during which nothing was admitted. What bounds capacity is small and is read whole at once: the
governance, the fleet and the admitted and running jobs (they hold the quota and the devices).
The backlog is not: each step queues the next pending jobs in the order every ClusterQueue
queues them (higher priority first, then earlier creation, then the name: the engine's own
order, :func:`gpuaas.engine.admission.cycle._queue_order`) into the engine, for about
``budget`` seconds, and admits.

The order comes from the database, a page at a time: the index ``ix_jobs_queue_order`` (state,
priority, creation, id) hands out the next page after the last job loaded (a keyset, one
priority at a time, highest first), so a step's cost does not grow with the backlog: a new
leader's first step reads no more at 100,000 pending than at 100 (it used to read and sort every
pending job's id and key first). The engine breaks ties of priority and creation time by the
job's name (its id as text), the index by the id as a number; a page therefore always ends
after the last job of its creation time, so what is loaded is a prefix of the engine's order
whatever the tie-break.

Why the order matters: the jobs loaded are always a prefix of every ClusterQueue's queue, so the
heads a cycle sees are the heads a full rebuild would see, and a job cannot be admitted ahead of
one that sorts before it in its own queue. :attr:`Backlog.boundary` is the queue key of the last
job loaded: the engine stops a pass where a queue runs out of loaded jobs while the backlog is
still loading (:attr:`gpuaas.engine.admission.AdmissionEngine.loaded_until`), since a job still
in the database might come next there.

A page holds only the columns a pending job is queued from (:data:`PENDING_COLUMNS`: not its
sentence, placement or flavors). Jobs submitted at a priority the backlog had already passed,
and jobs cancelled meanwhile, are the reconciler's sweep's to find once the backlog is loaded.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator

from sqlalchemy import select, tuple_
from sqlalchemy.engine import Row
from sqlalchemy.orm import Session

from gpuaas.model.job_state import JobState
from gpuaas.store.tables import Job

_JOBS = Job.__table__
#: rows fetched per query (a page of the queue order)
CHUNK = 500
#: what queuing a pending job reads (:meth:`gpuaas.service.reconciler.Reconciler._track`)
PENDING_COLUMNS = tuple(
    _JOBS.c[name]
    for name in (
        "id", "tenant_id", "user_id", "local_queue", "priority", "spec", "state", "reason_code",
        "reason_fields", "attempts", "cancel_requested", "created_at", "updated_at",
    )
)  # fmt: skip
_PENDING = JobState.PENDING.value


class Backlog:
    """The pending jobs still to load, in queue order (see the module docstring)."""

    def __init__(self, session: Session, skip: Collection[int]) -> None:
        self._skip = skip
        #: the priorities still to load, the highest last (popped as each is loaded)
        self._priorities = sorted(
            session.scalars(select(_JOBS.c.priority).where(_JOBS.c.state == _PENDING).distinct())
        )
        #: (created_at, id) of the last job loaded at the current priority
        self._after: tuple[float, int] | None = None
        #: rows read so far
        self.loaded = 0
        #: the queue key of the last job loaded (None before the first)
        self.boundary: tuple[int, float, str] | None = None

    @property
    def done(self) -> bool:
        return not self._priorities

    def _page(self, session: Session, priority: int, limit: int) -> list[Row]:
        """The next ``limit`` pending rows of ``priority`` in (creation, id) order, and then
        every further row of the last one's creation time (a page ends after a whole tie)."""
        where = [_JOBS.c.state == _PENDING, _JOBS.c.priority == priority]
        if self._after is not None:
            where.append(tuple_(_JOBS.c.created_at, _JOBS.c.id) > tuple_(*self._after))
        order = (_JOBS.c.created_at, _JOBS.c.id)
        rows = list(session.execute(
            select(*PENDING_COLUMNS).where(*where).order_by(*order).limit(limit)))  # fmt: skip
        if len(rows) == limit:
            last = rows[-1]
            rows.extend(session.execute(select(*PENDING_COLUMNS).where(
                _JOBS.c.state == _PENDING, _JOBS.c.priority == priority,
                _JOBS.c.created_at == last.created_at, _JOBS.c.id > last.id,
            ).order_by(_JOBS.c.id)))  # fmt: skip
        return rows

    def rows(self, session: Session, budget: float) -> Iterator[Row]:
        """The next pending rows in queue order, a page at a time, until ``budget`` seconds of
        this thread's CPU (this generator's and its consumer's) are spent or the backlog is
        loaded; jobs in ``skip`` (already tracked) are passed over. CPU, not wall time: on a
        busy machine a step loads as much as on a quiet one (and takes longer)."""
        deadline = time.thread_time() + budget
        read = 0  # at least CHUNK rows a step, whatever the budget
        while not self.done and (read < CHUNK or time.thread_time() < deadline):
            priority = self._priorities[-1]
            limit = CHUNK - read if read < CHUNK else CHUNK
            page = self._page(session, priority, limit)
            read += len(page)
            if page:
                last = page[-1]
                self._after = (last.created_at, last.id)
                tie = max(str(r.id) for r in page if r.created_at == last.created_at)
                self.boundary = (-priority, last.created_at, tie)
                self.loaded += len(page)
            if len(page) < limit:  # this priority is loaded: the next one down
                self._priorities.pop()
                self._after = None
            for row in page:
                if row.id not in self._skip:
                    yield row
