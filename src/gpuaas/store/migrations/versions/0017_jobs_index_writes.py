"""Fewer index entries written per job (issue 19, submissions at full speed).

A submission inserts one ``jobs`` row, and every index of the table is written with it (on
PostgreSQL each one is WAL that the commit waits to flush). Two of them were not needed:
``ix_jobs_state`` is the leading column of ``ix_jobs_queue_order``, which answers every
question by state alone; and ``ix_jobs_cancel_requested`` indexed every job for a flag that is
true for few, so it becomes a partial index of the cancel requests only (the reconcile step's
query names the same condition, so both databases use it).

Revision ID: 0017_jobs_index_writes
Revises: 0016_failover
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_jobs_index_writes"
down_revision = "0016_failover"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_jobs_state", table_name="jobs")
    op.drop_index("ix_jobs_cancel_requested", table_name="jobs")
    op.create_index(
        "ix_jobs_cancel_requested",
        "jobs",
        ["cancel_requested"],
        unique=False,
        sqlite_where=sa.text("cancel_requested IS 1"),
        postgresql_where=sa.text("cancel_requested IS true"),
    )


def downgrade() -> None:
    op.drop_index("ix_jobs_cancel_requested", table_name="jobs")
    op.create_index("ix_jobs_cancel_requested", "jobs", ["cancel_requested"], unique=False)
    op.create_index("ix_jobs_state", "jobs", ["state"], unique=False)
