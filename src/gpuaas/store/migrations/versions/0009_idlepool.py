"""The idle pool's reclaims in flight: which pool nodes are being given back, since when,
and the deadline before which their jobs are never evicted.

Revision ID: 0009_idlepool
Revises: 0008_datasets
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_idlepool"
down_revision = "0008_datasets"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "idle_pool_reclaims",
        sa.Column("node", sa.String(length=253), primary_key=True),
        sa.Column(
            "cluster_id",
            sa.Integer(),
            sa.ForeignKey("clusters.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("requested_at", sa.Float(), nullable=False),
        sa.Column("signalled_at", sa.Float(), nullable=True),
        sa.Column("grace", sa.Float(), nullable=False),
        sa.Column("evicting", sa.Boolean(), nullable=False),
        sa.Column("jobs", sa.JSON(), nullable=False),
        sa.Column("demand", sa.JSON(), nullable=False),
    )
    op.create_index("ix_idle_pool_reclaims_cluster_id", "idle_pool_reclaims", ["cluster_id"])


def downgrade() -> None:
    op.drop_table("idle_pool_reclaims")
