"""Group commit of submissions (service/group_commit.py), on SQLite and PostgreSQL: many
requests' jobs share one transaction, every acknowledged job is stored with its first event,
a repeated idempotency key answers the first job, and one bad row fails its own request only."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from job_world import build_world, job_spec
from sqlalchemy import JSON, Text, cast, func, insert, select

from gpuaas.service.audit import AuditEntry, AuditLog
from gpuaas.service.errors import ApiError
from gpuaas.service.group_commit import SubmissionWriter
from gpuaas.service.jobs import prepare_job
from gpuaas.service.models.jobs import JobSpec
from gpuaas.store.db import Database
from gpuaas.store.tables import AuditRow, Job, JobEvent, Tenant


@pytest.fixture
def world(db: Database) -> dict[str, int]:
    return build_world(db, quota_gpus=8, nodes=2)


@pytest.fixture
def writer(db: Database) -> Iterator[SubmissionWriter]:
    w = SubmissionWriter(db)
    w.start()
    yield w
    w.stop()


def prepared(db: Database, world: dict[str, int], name: str, **extra: Any) -> dict[str, Any]:
    with db.sessions() as s:
        tenant = s.get(Tenant, world["tenant"])
        assert tenant is not None
        spec = JobSpec.model_validate(job_spec(name, **extra))
        return prepare_job(s, tenant, world["alice"], spec, time.time())


async def submit_all(writer: SubmissionWriter, rows: list[dict[str, Any]]) -> list[Any]:
    return await asyncio.gather(*(writer.submit(v, "acme") for v in rows), return_exceptions=True)


def test_concurrent_submissions_share_transactions_and_all_are_stored(
    db: Database, world: dict[str, int], writer: SubmissionWriter
) -> None:
    rows = [prepared(db, world, f"j{i}", idempotencyKey=f"k{i}") for i in range(200)]
    results = asyncio.run(submit_all(writer, rows))
    assert all(created for _, created, *_ in results)
    ids = {job.id for job, *_ in results}
    assert len(ids) == 200
    assert writer.batches < 200  # the requests of the moment went in fewer transactions
    with db.sessions() as s:
        stored = set(s.scalars(select(Job.id)))
        assert stored == ids
        with_event = set(s.scalars(select(JobEvent.job_id).where(JobEvent.to_state == "Pending")))
        assert with_event == ids  # each with its first event
    by_name = {job.name: job for job, *_ in results}
    assert by_name["j7"].idempotency_key == "k7"


def test_a_repeated_key_in_one_batch_or_later_answers_the_first_job(
    db: Database, world: dict[str, int], writer: SubmissionWriter
) -> None:
    rows = [prepared(db, world, "same", idempotencyKey="once") for _ in range(5)]
    results = asyncio.run(submit_all(writer, rows))
    assert sum(created for _, created, *_ in results) == 1
    assert len({job.id for job, *_ in results}) == 1
    again = asyncio.run(submit_all(writer, [prepared(db, world, "same", idempotencyKey="once")]))
    assert again[0][1] is False and again[0][0].id == results[0][0].id
    with db.sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 1


def test_a_row_the_database_refuses_fails_its_own_request_only(
    db: Database, world: dict[str, int], writer: SubmissionWriter
) -> None:
    good = [prepared(db, world, f"ok{i}") for i in range(10)]
    bad = {**prepared(db, world, "orphan"), "user_id": 10**9}  # no such user: a foreign key
    results = asyncio.run(submit_all(writer, [*good[:5], bad, *good[5:]]))
    assert isinstance(results[5], Exception)
    assert all(not isinstance(r, Exception) and r[1] for i, r in enumerate(results) if i != 5)
    with db.sessions() as s:
        names = set(s.scalars(select(Job.name)))
    assert names == {f"ok{i}" for i in range(10)}


def test_idempotency_keys_are_per_user(
    db: Database, world: dict[str, int], writer: SubmissionWriter
) -> None:
    """The conflict clause names the (tenant, user, key) constraint: another user's key is
    not a repeat."""
    first = asyncio.run(submit_all(writer, [prepared(db, world, "a", idempotencyKey="k")]))[0]
    other = {**prepared(db, world, "a", idempotencyKey="k"), "user_id": world["bob"]}
    second = asyncio.run(submit_all(writer, [other]))[0]
    assert first[1] and second[1] and first[0].id != second[0].id  # keys are per user


def test_stop_writes_what_is_queued(db: Database, world: dict[str, int]) -> None:
    writer = SubmissionWriter(db)
    writer.start()
    rows = [prepared(db, world, f"q{i}") for i in range(20)]

    async def run() -> list[Any]:
        tasks = [asyncio.ensure_future(writer.submit(v, "acme")) for v in rows]
        await asyncio.sleep(0)
        return await asyncio.gather(*tasks)

    results = asyncio.run(run())
    writer.stop()
    assert len({job.id for job, *_ in results}) == 20
    with db.sessions() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 20


def test_errors_reach_the_request(db: Database, world: dict[str, int]) -> None:
    """A batch that cannot be written at all answers every waiting request with the error
    (here a statement the database cannot run), never leaves one waiting."""
    writer = SubmissionWriter(db)
    writer.start()
    row = prepared(db, world, "x")
    writer._insert = writer._insert.values(no_such_column=1)  # type: ignore[call-arg]
    results = asyncio.run(submit_all(writer, [row, row]))
    writer.stop()
    assert all(isinstance(r, Exception) and not isinstance(r, ApiError) for r in results)


def test_a_batch_stores_exactly_what_one_insert_stores(
    db: Database, world: dict[str, int], writer: SubmissionWriter
) -> None:
    """On PostgreSQL a batch goes as one JSON parameter (store/pg_rows.py): every column reads
    back as SQLAlchemy's own insert stores it, to the byte: the spec's JSON text, a ``None``
    reason_fields as JSON ``null`` (not SQL NULL), the float timestamps exactly."""
    rows = [prepared(db, world, f"b{i}", idempotencyKey=f"b{i}") for i in range(3)]
    for row in rows:
        row["created_at"] = row["updated_at"] = 1764140000.123456789 + len(row["name"]) / 7
        row["spec"]["labels"] = {"note": 'd\u00e9j\u00e0 \u2603 "q" \\ \U0001f600'}
    results = asyncio.run(submit_all(writer, rows))
    assert all(created for _, created, *_ in results)
    alone = {**rows[0], "idempotency_key": "alone"}
    with db.session() as s:
        s.execute(insert(Job), alone)
    columns = [c for c in Job.__table__.c if c.name not in ("id", "idempotency_key")]
    as_text = [cast(c, Text) if isinstance(c.type, JSON) else c for c in columns]
    with db.sessions() as s:
        by_key = {
            key: tuple(rest) for key, *rest in s.execute(select(Job.idempotency_key, *as_text))
        }
        events = s.execute(select(JobEvent.at, JobEvent.from_state, JobEvent.reason_code)).all()
        nulls = s.scalar(select(func.count()).select_from(Job).where(Job.reason_fields.is_(None)))
    assert by_key["b0"] == by_key["alone"]
    assert by_key["b0"][[c.name for c in columns].index("created_at")] == rows[0]["created_at"]
    assert nulls == 0  # JSON null, as SQLAlchemy's JSON stores None
    assert sorted(events) == sorted((r["created_at"], None, "Submitted") for r in rows)


def _draft(path: str = "/v1/tenants/acme/jobs") -> AuditEntry:
    """A create's draft entry as :func:`gpuaas.service.audit.create_draft` makes it."""
    return AuditEntry(
        at=0.0, user="alice", token_id=7, tenant="acme", method="POST", route=path,
        object=path, status=201, outcome="ok", request_digest="r" * 64, after_digest="",
    )  # fmt: skip


def _render(job: Any) -> bytes:
    return f'{{"id":{job.id},"name":"{job.name}"}}'.encode()


def test_a_created_jobs_audit_entry_is_committed_with_it(
    db: Database, world: dict[str, int]
) -> None:
    """With a draft, the writer stores each created job's entry in the job's transaction: the
    entries are there when the submissions are answered (the audit log's own thread never
    ran), one per created job, naming it, with its answer's digest and nothing before it; a
    repeated key (answered 200) and a refused row leave none here; a sink gets them later."""
    audit = AuditLog(http_sink="http://127.0.0.1:9/never")  # never started: no flush
    writer = SubmissionWriter(db, audit=audit)
    writer.start()
    try:
        good = [prepared(db, world, f"a{i}", idempotencyKey=f"a{i}") for i in range(6)]
        good += [prepared(db, world, f"n{i}") for i in range(3)]  # no key: inserted alone
        bad = {**prepared(db, world, "orphan"), "user_id": 10**9}  # a foreign key refuses it
        rows = [*good[:3], bad, *good[3:], prepared(db, world, "a0", idempotencyKey="a0")]

        async def run() -> list[Any]:
            return await asyncio.gather(
                *(writer.submit(v, "acme", _render, _draft()) for v in rows),
                return_exceptions=True,
            )

        results = asyncio.run(run())
    finally:
        writer.stop()
    assert isinstance(results[3], Exception)
    made = [r for r in results if not isinstance(r, Exception) and r.created]
    assert len(made) == 9 and all(r.audited and r.answer == _render(r.job) for r in made)
    repeat = results[-1]
    assert not isinstance(repeat, Exception) and not repeat.created and not repeat.audited
    with db.sessions() as s:
        entries = {e.object: e for e in s.scalars(select(AuditRow))}
        jobs = set(s.scalars(select(Job.id)))
    assert set(entries) == {f"/v1/tenants/acme/jobs/{job_id}" for job_id in jobs}
    for r in made:
        entry = entries[f"/v1/tenants/acme/jobs/{r.job.id}"]
        assert entry.after_digest == hashlib.sha256(_render(r.job)).hexdigest()
        assert entry.before_digest is None and entry.status == 201 and entry.user == "alice"
        assert entry.request_digest == "r" * 64 and entry.at > 0
    shipped: list[AuditEntry] = []
    while not audit._to_ship.empty():
        shipped += audit._to_ship.get_nowait()
    assert sorted(e.object for e in shipped) == sorted(entries)  # for the sinks, after commit


def test_entries_queued_before_a_batch_are_stored_before_its_own(
    db: Database, world: dict[str, int]
) -> None:
    """Entries the audit log holds queued when a batch with entries is written are stored
    first (in their own transaction, under the log's lock): ``id`` follows the requests."""
    audit = AuditLog(flush_interval=3600)
    audit.start(db)  # its thread waits an hour: only the writer flushes here
    writer = SubmissionWriter(db, audit=audit)
    writer.start()
    try:
        audit.record(replace(_draft("/v1/tenants"), object="/v1/tenants/acme", after_digest="x"))
        row = prepared(db, world, "after", idempotencyKey="after")

        async def run() -> Any:
            return await writer.submit(row, "acme", _render, _draft())

        stored = asyncio.run(run())
    finally:
        writer.stop()
        audit.stop()
    with db.sessions() as s:
        objects = list(s.scalars(select(AuditRow.object).order_by(AuditRow.id)))
    assert objects == ["/v1/tenants/acme", f"/v1/tenants/acme/jobs/{stored.job.id}"]
