"""An inference job's replicas: the set (the job itself, its desired count and last
decision) and its further replica jobs.

Revision ID: 0011_replicas
Revises: 0010_audit
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_replicas"
down_revision = "0010_audit"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "replica_sets",
        sa.Column("job_id", _ID, sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("desired", sa.Integer(), nullable=False),
        sa.Column("scaled_at", sa.Float(), nullable=True),
        sa.Column("full", sa.JSON(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("reason_code", sa.String(length=64), nullable=False),
        sa.Column("reason_fields", sa.JSON(), nullable=True),
        sa.Column("decided_at", sa.Float(), nullable=True),
    )
    op.create_table(
        "replica_members",
        sa.Column("job_id", _ID, sa.ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column(
            "set_id",
            _ID,
            sa.ForeignKey("replica_sets.job_id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("cluster", sa.String(length=63), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
    )
    op.create_index("ix_replica_members_set_id", "replica_members", ["set_id"])


def downgrade() -> None:
    op.drop_index("ix_replica_members_set_id", table_name="replica_members")
    op.drop_table("replica_members")
    op.drop_table("replica_sets")
