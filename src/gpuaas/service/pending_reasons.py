"""The reconciler's pending reasons, stored on PostgreSQL in one statement per chunk.

Every few seconds the reconciler stores why each pending job waits, where that changed: with a
backlog that is a reason per submission (measured: 1.2 ``UPDATE jobs`` per submission under
``bench api``), which SQLAlchemy's ``executemany`` sends as one statement per job. Here a chunk
is one ``UPDATE ... FROM json_to_recordset(...)`` of fixed text (:mod:`gpuaas.store.pg_rows`),
with the same condition as the per-job statement: a job that left ``Pending`` meanwhile keeps
its reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from gpuaas.model.job_state import JobState
from gpuaas.store.pg_rows import driver_cursor, json_rows, rows_param
from gpuaas.store.tables import Job

_JOBS = Job.__table__
#: the row keys the reconciler builds, and the job columns they go to
_KEYS = {"jid": "id", "why": "reason", "rcode": "reason_code", "rfields": "reason_fields"}
_COLUMNS = tuple(_KEYS.values())
_UPDATE = (
    f"UPDATE {_JOBS.name} SET reason = u.reason, reason_code = u.reason_code,"
    f" reason_fields = COALESCE(u.reason_fields, 'null'::json)"
    f" FROM {json_rows(_JOBS, _COLUMNS, 'u')}"
    f" WHERE {_JOBS.name}.id = u.id AND {_JOBS.name}.state = %s"
)


def store_reasons_pg(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """``rows``: ``{jid, why, rcode, rfields}`` each, as the reconciler's per-job statement
    takes them; written in the session's transaction."""
    if not rows:
        return
    renamed = [{column: row[key] for key, column in _KEYS.items()} for row in rows]
    cursor = driver_cursor(session)
    try:
        cursor.execute(_UPDATE, [rows_param(renamed), JobState.PENDING.value])
    finally:
        cursor.close()
