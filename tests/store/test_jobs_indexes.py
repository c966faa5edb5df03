"""The jobs table's indexes after migration 0017: the questions the reconciler and the backlog
ask are still answered by an index, and a submission's insert writes no entry to the partial
index of cancel requests."""

from __future__ import annotations

import time

from sqlalchemy import create_engine, insert, select, text
from sqlalchemy.engine import Connection
from sqlalchemy.pool import NullPool

from gpuaas.service.reconciler import UNFINISHED
from gpuaas.store.db import normalise_url, upgrade
from gpuaas.store.tables import Job


def _plan(connection: Connection, statement: object) -> str:
    sql = str(statement.compile(connection, compile_kwargs={"literal_binds": True}))  # type: ignore[attr-defined]
    if connection.dialect.name == "sqlite":
        return " ".join(
            str(row[-1]) for row in connection.execute(text("EXPLAIN QUERY PLAN " + sql))
        )
    connection.execute(text("SET LOCAL enable_seqscan = off"))
    return " ".join(row[0] for row in connection.execute(text("EXPLAIN " + sql)))


def _jobs(count: int, cancelled_every: int) -> list[dict[str, object]]:
    now = time.time()
    return [
        {
            "tenant_id": 1,
            "user_id": 1,
            "name": f"j{i}",
            "kind": "training",
            "local_queue": "q",
            "priority": 0,
            "spec": {},
            "state": "Pending",
            "reason": "",
            "reason_code": "",
            "gpus": 0,
            "attempts": 0,
            "cancel_requested": i % cancelled_every == 0,
            "created_at": now + i,
            "updated_at": now + i,
        }
        for i in range(1, count + 1)
    ]


def test_cancel_requests_and_states_are_answered_by_an_index(db_url: str) -> None:
    upgrade(db_url)
    engine = create_engine(normalise_url(db_url), poolclass=NullPool)
    try:
        with engine.begin() as connection:
            if connection.dialect.name == "sqlite":
                connection.execute(text("PRAGMA foreign_keys = OFF"))
            else:
                connection.execute(text("SET LOCAL session_replication_role = replica"))
            connection.execute(insert(Job), _jobs(2000, 500))
            if connection.dialect.name == "postgresql":
                connection.execute(text("ANALYZE jobs"))
        with engine.begin() as connection:
            cancels = select(Job.id).where(
                Job.cancel_requested.is_(True), Job.state.in_(UNFINISHED)
            )
            assert "ix_jobs_cancel_requested" in _plan(connection, cancels)
            assert len(connection.execute(cancels).all()) == 4
        with engine.begin() as connection:
            pending = select(Job.id).where(Job.state == "Pending")
            assert "ix_jobs_queue_order" in _plan(connection, pending)
        with engine.connect() as connection:
            if connection.dialect.name == "postgresql":  # only the 4 requests are in it
                entries = connection.execute(
                    text("SELECT count(*) FROM jobs WHERE cancel_requested IS true")
                ).scalar_one()
                size = connection.execute(
                    text("SELECT pg_relation_size('ix_jobs_cancel_requested')")
                ).scalar_one()
                assert entries == 4 and size <= 2 * 8192  # a meta page and one leaf
    finally:
        engine.dispose()
