"""A new leader's backlog in queue order, and cancel requests, by index (issue 19, fast
leadership): ``ix_jobs_queue_order`` (state, priority, created_at, id) pages the pending jobs
in the order the engine queues them; ``ix_jobs_cancel_requested`` answers every reconcile
step's question for cancel requests without a scan of the pending jobs.

Revision ID: 0016_failover
Revises: 0015_billing
"""

from __future__ import annotations

from alembic import op

revision = "0016_failover"
down_revision = "0015_billing"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_jobs_queue_order", "jobs", ["state", "priority", "created_at", "id"], unique=False
    )
    op.create_index("ix_jobs_cancel_requested", "jobs", ["cancel_requested"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_jobs_cancel_requested", table_name="jobs")
    op.drop_index("ix_jobs_queue_order", table_name="jobs")
