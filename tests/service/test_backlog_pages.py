"""The backlog's pages (service/backlog.py): read from the queue-order index a page at a time,
what is loaded after every page is a prefix of the engine's own queue order (priority, then
creation, then the name: the id as text), even where jobs share a creation time and their ids
sort differently as numbers and as text; the boundary is that prefix's last key, and jobs
already tracked are passed over."""

from __future__ import annotations

import random

import pytest
from sqlalchemy import select

from gpuaas.service import backlog, failover_bench
from gpuaas.store.db import Database
from gpuaas.store.tables import Job

AT = 1_000_000.0


def _key(job_id: int, priority: int, created: float) -> tuple[int, float, str]:
    return (-priority, created, str(job_id))


@pytest.mark.parametrize(("tie", "chunk"), [(1, 4), (3, 4), (7, 3), (25, 10)])
def test_every_page_ends_a_prefix_of_the_queue_order(
    db_url: str, tmp_path, monkeypatch: pytest.MonkeyPatch, tie: int, chunk: int
) -> None:
    db = Database(db_url)
    try:
        world = failover_bench.build(db, tenants=2, nodes=1)
        rows = failover_bench._rows(db, world, 60, AT, random.Random(tie))
        for i, row in enumerate(rows):
            row["created_at"] = AT + i // tie  # ``tie`` jobs a creation time
        failover_bench.insert_rows(db, rows)
        with db.sessions() as s:
            jobs = s.execute(select(Job.id, Job.priority, Job.created_at)).all()
        assert any(len(str(j.id)) != len(str(jobs[0].id)) for j in jobs)  # 9 < 10, "10" < "9"
        order = sorted(_key(*j) for j in jobs)
        skip = {jobs[5].id, jobs[40].id}
        monkeypatch.setattr(backlog, "CHUNK", chunk)
        seen: list[int] = []
        with db.sessions() as s:
            plan = backlog.Backlog(s, skip)
            while not plan.done:
                before = plan.loaded
                seen.extend(row.id for row in plan.rows(s, 0.0))
                assert plan.loaded - before >= chunk or plan.done
                prefix = order[: plan.loaded]
                assert set(seen) == {int(k[2]) for k in prefix} - skip
                assert plan.boundary == prefix[-1]
        assert sorted(seen) == sorted(j.id for j in jobs if j.id not in skip)
    finally:
        db.dispose()


def test_a_page_holds_what_queuing_reads(sqlite_url: str, tmp_path) -> None:
    """The columns a pending job is queued from, and not its sentence, placement or flavors."""
    names = {c.name for c in backlog.PENDING_COLUMNS}
    assert {"spec", "priority", "created_at", "reason_code", "reason_fields"} <= names
    assert not names & {"reason", "placement", "flavors"}
    db = Database(sqlite_url)
    try:
        world = failover_bench.build(db, tenants=1, nodes=1)
        failover_bench.insert_rows(db, failover_bench._rows(db, world, 3, AT, random.Random(1)))
        with db.sessions() as s:
            plan = backlog.Backlog(s, set())
            (row, *_) = list(plan.rows(s, 0.0))
            assert set(row._fields) == names
    finally:
        db.dispose()
