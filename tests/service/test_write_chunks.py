"""A reconcile step's writes in short transactions on SQLite (service/write_chunks.py): each
chunk commits at a boundary once it has run its budget, a failure keeps what was committed,
no collection runs while a chunk holds the lock, and a step that evicts commits the
preemptor's admission with its victims' evictions."""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from job_world import build_world, devices_given_twice
from sqlalchemy import func, select, text
from test_reconciler import gang, submit

from gpuaas.service import reconciler as reconciler_module
from gpuaas.service import write_chunks
from gpuaas.service.reconciler import Reconciler
from gpuaas.service.settings import Settings
from gpuaas.service.write_chunks import WriteChunks
from gpuaas.store.db import Database
from gpuaas.store.tables import Job, JobEvent

T0 = 1_000_000.0


@pytest.fixture
def sqlite_db(sqlite_url: str) -> Iterator[Database]:
    database = Database(sqlite_url)
    database.upgrade()
    yield database
    database.dispose()


def meta_keys(db: Database) -> set[str]:
    with db.sessions() as s:
        return set(s.scalars(text("SELECT key FROM meta WHERE key LIKE 'chunk-%'")))


def put(chunks: WriteChunks, key: str) -> None:
    chunks.session.execute(text("INSERT INTO meta (key, value) VALUES (:k, '1')"), {"k": key})


def test_a_boundary_commits_once_the_budget_is_spent(sqlite_db: Database) -> None:
    with WriteChunks(sqlite_db, budget=0.0) as chunks:
        put(chunks, "chunk-a")
        chunks.boundary()
        assert meta_keys(sqlite_db) == {"chunk-a"}  # committed: another session sees it
        put(chunks, "chunk-b")
        assert meta_keys(sqlite_db) == {"chunk-a"}
    assert meta_keys(sqlite_db) == {"chunk-a", "chunk-b"}
    assert chunks.commits == 2


def test_within_the_budget_a_boundary_commits_nothing(sqlite_db: Database) -> None:
    with WriteChunks(sqlite_db, budget=60.0) as chunks:
        put(chunks, "chunk-a")
        chunks.boundary()
        put(chunks, "chunk-b")
        assert meta_keys(sqlite_db) == set()
    assert meta_keys(sqlite_db) == {"chunk-a", "chunk-b"}
    assert chunks.commits == 1


def test_a_failure_rolls_back_the_open_chunk_only(sqlite_db: Database) -> None:
    with pytest.raises(RuntimeError), WriteChunks(sqlite_db, budget=0.0) as chunks:
        put(chunks, "chunk-a")
        chunks.boundary()
        put(chunks, "chunk-b")
        raise RuntimeError("a later write failed")
    assert meta_keys(sqlite_db) == {"chunk-a"}


def test_no_collection_while_a_chunk_holds_the_lock(sqlite_db: Database) -> None:
    assert gc.isenabled()
    with WriteChunks(sqlite_db, budget=0.0) as chunks:
        put(chunks, "chunk-a")
        assert not gc.isenabled()
        chunks.boundary()
        assert gc.isenabled()  # between chunks
        put(chunks, "chunk-b")
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:  # a process that had it off keeps it off
        with WriteChunks(sqlite_db, budget=0.0) as chunks:
            put(chunks, "chunk-c")
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_postgresql_keeps_one_transaction() -> None:
    db = Database("postgresql://nobody@127.0.0.1:1/none")  # not connected to
    try:
        assert WriteChunks(db, budget=0.0).budget == math.inf
    finally:
        db.dispose()


# --- the reconciler's step ------------------------------------------------------------------


class Recording(WriteChunks):
    """WriteChunks that notes, at each commit, the last job event its chunk wrote."""

    marks: list[int]

    def _close(self, commit: bool) -> None:
        if commit and self._session is not None:
            last = self._session.scalar(select(func.max(JobEvent.id))) or 0
            Recording.marks.append(int(last))
        super()._close(commit)


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    monkeypatch.setattr(write_chunks, "CHUNK_SECONDS", 0.0)  # every boundary commits
    monkeypatch.setattr(reconciler_module, "WriteChunks", Recording)
    Recording.marks = []
    return Recording.marks


def chunk_of_events(db: Database, marks: list[int]) -> dict[tuple[int, str | None, str], int]:
    """(job, from, to) of every event -> the index of the commit that stored it."""
    with db.sessions() as s:
        rows = s.execute(select(JobEvent.id, JobEvent.job_id, JobEvent.from_state,
                                JobEvent.to_state)).all()  # fmt: skip
    found = {}
    for event_id, job_id, source, target in rows:
        chunk = next((i for i, mark in enumerate(marks) if event_id <= mark), -1)
        found[(job_id, source, target)] = chunk
    return found


def test_a_steps_admissions_are_committed_apart(
    sqlite_db: Database, tmp_path: Path, recorded: list[int]
) -> None:
    world = build_world(sqlite_db, quota_gpus=8, nodes=2)
    ids = [submit(sqlite_db, world, gang(f"j{i}", 1, 1, duration=100)) for i in range(4)]
    reconciler = Reconciler(sqlite_db, Settings(db_url=sqlite_db.url, data_dir=tmp_path))
    try:
        recorded.clear()
        reconciler.step(T0 + 1)
    finally:
        reconciler.stop()
    chunks = chunk_of_events(sqlite_db, recorded)
    admitted = {chunks[(i, "Pending", "Admitted")] for i in ids}
    assert len(admitted) == 4  # one commit each
    with sqlite_db.sessions() as s:
        assert set(s.scalars(select(Job.state))) == {"Admitted"}
        assert devices_given_twice(s) == []


def test_a_preemptors_admission_is_committed_with_its_victims_evictions(
    sqlite_db: Database, tmp_path: Path, recorded: list[int]
) -> None:
    world = build_world(sqlite_db, quota_gpus=8, nodes=2)
    low = submit(sqlite_db, world, gang("low", 2, 4, duration=1000, priorityClass="low"))
    reconciler = Reconciler(sqlite_db, Settings(db_url=sqlite_db.url, data_dir=tmp_path))
    try:
        reconciler.step(T0 + 1)
        reconciler.step(T0 + 2)
        high = submit(sqlite_db, world, gang("high", 1, 4, duration=100, priorityClass="high"))
        recorded.clear()
        reconciler.step(T0 + 4)
    finally:
        reconciler.stop()
    chunks = chunk_of_events(sqlite_db, recorded)
    evicted = chunks[(low, "Running", "Preempted")]
    assert evicted >= 0
    assert chunks[(low, "Preempted", "Pending")] == evicted
    assert chunks[(high, "Pending", "Admitted")] == evicted
